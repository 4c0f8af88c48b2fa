"""Failure fixtures: a cluster of two 8-GPU nodes with tokens, node-event batches, jobs that
run and fail through the real scheduler-event path (jobs.services.job_events_ingest)."""

from __future__ import annotations

import pytest

from tests.factory import SmallCluster, cluster_make

CLUSTER = "testcluster"
NODES = ("gpu-node-01", "gpu-node-02")
# The failure tests name a GPU as its node's agent reports it (GPU-gpu-node-02-03, the bus id
# 00000000:23:00.0 of GPU 3 on the second node).
UUID_FORMAT = "GPU-{host}-{index:02d}"
PCI_FORMAT = "00000000:{node_no}{index}:00.0"

# The fleet: node_batch, job_batch and run_job (jobs run as "alice" on both nodes by default).
Fleet = SmallCluster


def pci(node_no: int, index: int) -> str:
    return PCI_FORMAT.format(node_no=node_no, index=index)


def xid_event(ts: float, xid: int, index: int = 3, node_no: int = 2, **kw) -> dict:
    return {
        "ts": ts,
        "kind": "xid",
        "source": "kmsg",
        "gpu_index": index,
        "pci_bus_id": pci(node_no, index),
        "xid": xid,
        **kw,
    }


def nccl_window(job_id: str, ts: float, rank: int = 3, first_line_no: int = 120) -> dict:
    return {
        "job_id": job_id,
        "ts": ts,
        "path": f"/home/alice/logs/{job_id}.out",
        "first_line_no": first_line_no,
        "trigger": "Watchdog caught collective operation timeout",
        "lines": [
            f"[rank{rank}]: step 1200 loss 2.31",
            f"[rank{rank}]:[E1129 09:10:00.000 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=4821, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before "
            "timing out.",
            f"[rank{rank}]: Some NCCL operations have failed or timed out.",
        ],
    }


def make_fleet() -> Fleet:
    """Two 8-GPU nodes; the first sends the job events."""
    return cluster_make(CLUSTER, NODES, 8, uuid_format=UUID_FORMAT, pci_format=PCI_FORMAT)


@pytest.fixture
def fleet(db) -> Fleet:
    return make_fleet()


@pytest.fixture
def committed_fleet(transactional_db) -> Fleet:
    return make_fleet()
