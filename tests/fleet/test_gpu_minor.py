"""Jobs are attributed GPUs by device, not by position: Slurm's GRES index names the device
file /dev/nvidiaN (the device minor number), which need not be NVML's index. A node whose
agent reports minor numbers is matched by them; one that does not, by NVML index."""

from __future__ import annotations

import json
import time

import pytest

from collectors.schema import GpuInfo
from tests.factory import cluster_make, job_event_batch
from webapp.fleet.models import Gpu, Node
from webapp.fleet.services import gpus_register
from webapp.jobs.models import Job
from webapp.jobs.services import job_events_ingest

pytestmark = pytest.mark.django_db

# NVML index -> (uuid, minor number, bus id): NVML orders by PCI bus, the driver numbered the
# device files in another order (Princeton's Jobstats met this on its nodes).
SWAPPED = {
    0: ("GPU-aaaa-0", 2, "00000000:18:00.0"),
    1: ("GPU-bbbb-1", 3, "00000000:2A:00.0"),
    2: ("GPU-cccc-2", 0, "00000000:3A:00.0"),
    3: ("GPU-dddd-3", 1, "00000000:5D:00.0"),
}


def _node(minors: bool) -> tuple[str, str]:
    made = cluster_make("mincluster", {"sched": 0, "gpu-node-01": 0}, scheduler="sched")
    node = Node.objects.get(hostname="gpu-node-01")
    gpus_register(
        node.pk,
        [
            GpuInfo(index=i, uuid=uuid, pci_bus_id=bus, minor_number=minor if minors else None)
            for i, (uuid, minor, bus) in SWAPPED.items()
        ],
    )
    return "sched", made.tokens["sched"]


def _job_on(token: str, gres_indices: list[int]) -> Job:
    t0 = float(int(time.time()) - 600)
    started = {
        "job_id": "5150", "kind": "started", "ts": t0, "start_ts": t0,
        "allocation": [{"node": "gpu-node-01", "gpu_indices": gres_indices}],
    }  # fmt: skip
    job_events_ingest(json.dumps(job_event_batch("mincluster", "sched", token, started)))
    return Job.objects.get(scheduler_id="5150")


def test_a_job_holding_gres_0_1_is_attributed_the_gpus_of_dev_nvidia0_and_1(db):
    _, token = _node(minors=True)
    job = _job_on(token, [0, 1])
    held = sorted(
        (a.gpu.minor_number, a.gpu.uuid, a.gpu_index) for a in job.allocations.select_related("gpu")
    )
    # /dev/nvidia0 and /dev/nvidia1 are NVML's GPUs 2 and 3, not 0 and 1.
    assert held == [(0, "GPU-cccc-2", 2), (1, "GPU-dddd-3", 3)]


def test_an_agent_without_minor_numbers_is_matched_by_position(db):
    _, token = _node(minors=False)
    job = _job_on(token, [0, 1])
    held = sorted((a.gpu.uuid, a.gpu_index) for a in job.allocations.select_related("gpu"))
    assert held == [("GPU-aaaa-0", 0), ("GPU-bbbb-1", 1)]


def test_the_minor_number_is_stored_and_the_admin_says_gpus(db):
    _node(minors=True)
    assert dict(Gpu.objects.values_list("index", "minor_number")) == {0: 2, 1: 3, 2: 0, 3: 1}
    assert str(Gpu._meta.verbose_name_plural) == "GPUs"
