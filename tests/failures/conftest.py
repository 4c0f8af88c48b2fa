"""Failure fixtures: a cluster of two 8-GPU nodes with tokens, node-event batches, jobs that
run and fail through the real scheduler-event path (jobs.services.job_events_ingest)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import pytest

from collectors.schema import GpuInfo
from webapp.fleet import services as fleet_services
from webapp.jobs.services import job_events_ingest

CLUSTER = "testcluster"
NODES = ("gpu-node-01", "gpu-node-02")


def pci(node_no: int, index: int) -> str:
    return f"00000000:{node_no}{index}:00.0"


@dataclass
class Fleet:
    cluster: str
    tokens: dict[str, str]

    def node_batch(self, node: str, gpu_events=(), log_windows=(), **overrides) -> str:
        batch = {
            "v": 1,
            "batch_id": str(uuid.uuid4()),
            "cluster": self.cluster,
            "node": node,
            "token": self.tokens[node],
            "sent_at": time.time(),
            "gpu_events": list(gpu_events),
            "log_windows": list(log_windows),
        }
        batch.update(overrides)
        return json.dumps(batch)

    def job_batch(self, *events: dict) -> str:
        return json.dumps(
            {
                "v": 1,
                "batch_id": str(uuid.uuid4()),
                "cluster": self.cluster,
                "node": NODES[0],
                "token": self.tokens[NODES[0]],
                "sent_at": time.time(),
                "source": "slurm",
                "events": list(events),
            }
        )

    def run_job(
        self,
        job_id: str,
        start: float,
        end: float | None,
        *,
        state: str = "FAILED",
        nodes: tuple[str, ...] = NODES,
        gpus: int = 8,
        exit_code: int = 1,
        job_type: str = "pretrain",
        user: str = "alice",
        last_checkpoint_ts: float | None = None,
    ) -> None:
        """Start a job on `nodes` (all 8 GPUs each) and, with `end`, end it in `state`."""
        alloc = [{"node": n, "gpu_indices": list(range(gpus))} for n in nodes]
        events = [
            {
                "job_id": job_id,
                "kind": "started",
                "ts": start,
                "name": f"train-{job_id}",
                "user": user,
                "job_type": job_type,
                "allocation": alloc,
                "gpus_requested": gpus * len(nodes),
                "nodes_requested": len(nodes),
                **({"last_checkpoint_ts": last_checkpoint_ts} if last_checkpoint_ts else {}),
            }
        ]
        if end is not None:
            events.append(
                {
                    "job_id": job_id,
                    "kind": "ended",
                    "ts": end,
                    "state": state,
                    "exit_code": exit_code,
                }
            )
        job_events_ingest(self.job_batch(*events))


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
    tokens = {}
    for no, host in enumerate(NODES, 1):
        tokens[host] = fleet_services.node_token_issue(CLUSTER, host)
        if host == NODES[0]:
            fleet_services.node_scheduler_grant(CLUSTER, host)  # it sends the job events
        node = fleet_services.node_authenticate(CLUSTER, host, tokens[host])
        fleet_services.gpus_register(
            node.id,
            [
                GpuInfo(index=i, uuid=f"GPU-{host}-{i:02d}", name="A100", pci_bus_id=pci(no, i))
                for i in range(8)
            ],
        )
    return Fleet(CLUSTER, tokens)


@pytest.fixture
def fleet(db) -> Fleet:
    return make_fleet()


@pytest.fixture
def committed_fleet(transactional_db) -> Fleet:
    return make_fleet()
