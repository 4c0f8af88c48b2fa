"""`manage.py issue_node_token`: tokens, and the scheduler role (--scheduler / --no-scheduler)."""

from __future__ import annotations

import io
import json

from django.core.management import call_command

from webapp.fleet.models import Node
from webapp.fleet.services import node_authenticate


def issue(*args: str) -> dict[str, str]:
    out = io.StringIO()
    call_command("issue_node_token", "--cluster", "seren", "--json", *args, stdout=out)
    return json.loads(out.getvalue())


def role(hostname: str) -> bool:
    return Node.objects.get(hostname=hostname).may_send_job_events


def test_scheduler_flag_grants_the_role_and_a_rotation_without_it_keeps_it(db):
    tokens = issue("--scheduler", "slurm-ctl-01")
    assert node_authenticate("seren", "slurm-ctl-01", tokens["slurm-ctl-01"])
    assert role("slurm-ctl-01")

    issue("slurm-ctl-01")  # a new token only
    assert role("slurm-ctl-01")
    issue("--no-scheduler", "slurm-ctl-01")
    assert not role("slurm-ctl-01")


def test_a_node_token_alone_has_no_scheduler_role(db):
    issue("gpu-a-001")
    assert not role("gpu-a-001")
