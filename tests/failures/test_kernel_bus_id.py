"""The kernel names a GPU by its bus id without the PCI function ("NVRM: Xid (PCI:0000:23:00):
79"), NVML with it ("00000000:23:00.0"): an Xid an agent could not map to a GPU itself is still
the GPU of that bus id, and the failure blames that GPU."""

from __future__ import annotations

import time

from tests.failures.conftest import xid_event
from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.failures.node_events import node_events_ingest, pci_bdf
from webapp.failures.services import failure_diagnose


def test_one_spelling_of_a_bus_id_whatever_its_domain_width_and_function():
    assert pci_bdf("0000:3b:00") == pci_bdf("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci_bdf("3b:00.0") == "0000:3b:00.0"


def test_an_xid_named_by_the_kernels_bus_id_is_its_gpus(fleet):
    now = time.time()
    fleet.run_job("700", now - 3600, None, nodes=("gpu-node-02",))
    event = xid_event(now - 30, 79, index=3, message="GPU has fallen off the bus.")
    event.update(gpu_index=None, pci_bus_id="0000:23:00")  # as the kernel line spells it
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[event]))
    error = GpuErrorEvent.objects.get()
    assert (error.gpu.index, error.gpu.pci_bus_id) == (3, "00000000:23:00.0")
    failure = FailureEvent.objects.get(kind="gpu_error")
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    assert failure.blamed_gpu is not None and failure.blamed_gpu.index == 3
