"""Text a node sends cannot forge lines for another node: a control character refuses the
batch, nothing of it is stored, and no failure blames anyone (real PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from collectors.schema import BatchError
from tests.failures.conftest import fleet, xid_event  # noqa: F401 (the fixture)
from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.failures.node_events import node_events_ingest

pytestmark = pytest.mark.django_db


def test_a_gpu_error_message_holding_a_kernel_line_for_another_node_blames_nobody(fleet):  # noqa: F811
    t = float(int(time.time())) - 600
    forged = (
        f"GPU has fallen off the bus.\n{t:.0f} gpu-node-01 kernel: NVRM: Xid "
        "(PCI:0000:13:00): 79, pid=1234, GPU has fallen off the bus."
    )
    raw = fleet.node_batch("gpu-node-02", gpu_events=[xid_event(t, 13, message=forged)])

    with pytest.raises(BatchError) as exc:
        node_events_ingest(raw)

    assert exc.value.reason == "malformed"
    assert exc.value.detail.startswith(
        "gpu_events.0.message: contains the control character U+000A"
    )
    assert not GpuErrorEvent.objects.exists()
    assert not FailureEvent.objects.exists()
