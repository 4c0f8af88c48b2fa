"""Node states from a real Slurm reach Vigil: drained by hand with `scontrol`, seen by the
watcher's `sinfo`, sent through the real transport to a real worker.

The cluster is tests/slurm.py's two logical nodes (vn1, vn2); the pattern is that of
tests/jobs/test_slurm.py. The watcher runs on a scheduler-role host that is not a Slurm node.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from collectors.schema import JOB_EVENTS_TASK
from collectors.transport import Transport
from collectors.watchers.slurm import SlurmWatcher
from tests.helpers import wait_for
from tests.slurm import slurm_two_nodes  # noqa: F401 (the session fixture)
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Node

pytestmark = pytest.mark.integration


def _node(cluster: str, hostname: str) -> Node:
    return Node.objects.get(cluster__name=cluster, hostname=hostname)


def _poll_until(watcher, transport, cluster: str, hostname: str, state: str) -> Node:
    """Poll the watcher (as the agent loop would) until Vigil shows the node in `state`."""
    deadline = time.monotonic() + 60
    node = None
    while time.monotonic() < deadline:
        for batch_id, text in watcher.poll():
            assert transport.send(text, batch_id, task=JOB_EVENTS_TASK)
        watcher.commit()
        node = _node(cluster, hostname)
        if node.state == state:
            return node
        time.sleep(0.3)
    raise AssertionError(f"{hostname} not {state} in Vigil: {node.state!r}")


def test_a_drain_by_hand_and_its_resume_show_in_vigil(
    slurm_two_nodes,  # noqa: F811
    worker_factory,
    committed_node_token,
    monkeypatch,
    tmp_path,
):
    slurm = slurm_two_nodes
    cluster, sender, token = committed_node_token
    fleet_services.node_scheduler_grant(cluster, sender)
    for name in slurm.nodes:
        fleet_services.node_token_issue(cluster, name)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("SLURM_TIME_FORMAT", "%s")  # for the test's own sinfo, as the watcher's
    worker_factory()
    transport = Transport(settings.CELERY_BROKER_URL, tmp_path / "spool")
    watcher = SlurmWatcher(cluster, sender, token, state_path=tmp_path / "watcher.json")
    reason = "hand drain: fan 3 failed, ticket 4411"
    try:
        # A job holds vn1 while an operator drains it: draining until the job is gone.
        job = slurm.sbatch("-w", "vn1", "--gres=gpu:2", "--wrap", "sleep 300")
        wait_for(lambda: slurm.job_state(job) == "RUNNING")
        slurm.run("scontrol", "update", "NodeName=vn1", "State=DRAIN", f"Reason={reason}")
        node = _poll_until(watcher, transport, cluster, "vn1", "draining")
        assert node.state_reason == reason
        slurm.run("scancel", job)
        node = _poll_until(watcher, transport, cluster, "vn1", "drained")

        # What `sinfo -R` says, since when Slurm says.
        assert node.state_reason == reason == slurm.drain_reason("vn1")
        drained_at = float(slurm.run("sinfo", "-h", "-n", "vn1", "-o", "%H"))
        assert node.state_since.timestamp() == drained_at
        assert _node(cluster, "vn2").state == "registered"  # never drained: untouched

        # Returned to service in Slurm: out of the drained state in Vigil too, reason gone
        # (registered, not up: these nodes never sent telemetry).
        slurm.resume_all()
        node = _poll_until(watcher, transport, cluster, "vn1", "registered")
        assert node.state_reason == ""
    finally:
        transport.close()
        slurm.cancel_all()
        slurm.resume_all()
