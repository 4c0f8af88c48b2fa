"""A node the scheduler drained while a job still runs on it reads "draining", as Slurm names a
node with the DRAIN flag and jobs allocated, on the overview and its own page; "drained" only
once no job holds it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.telemetry.conftest import SmallFleet, seed_small_fleet
from tests.telemetry.helpers import gpus_hold, node_a01_drain


@pytest.fixture
def fleet(db) -> SmallFleet:
    return seed_small_fleet()


def _overview_state(client) -> str:
    data = client.get(reverse("pages_api:overview_json"), {"gpus": "1"}).json()
    alpha = next(c for c in data["clusters"] if c["name"] == "alpha")
    [by_script] = {g["node_state"] for g in data["gpus"] if g["node"] == "gpu-a-01"}
    state = alpha["grid"]["states"][alpha["grid"]["hosts"].index("gpu-a-01")]
    assert by_script == state
    return state


def _node_badge(client, fleet) -> str:
    page = client.get(reverse("pages:node", args=[fleet.a01.pk]))
    return page.context["node_state"].label


def test_a_drained_node_with_a_running_job_reads_draining(operator_client, fleet):
    gpus_hold(fleet, "77", [0, 4])
    node_a01_drain(fleet)
    assert _overview_state(operator_client) == "draining"
    assert _node_badge(operator_client, fleet) == "Draining"


def test_a_drained_node_whose_jobs_ended_reads_drained(operator_client, fleet):
    gpus_hold(fleet, "76", [0, 1], ended=True)
    node_a01_drain(fleet)
    assert _overview_state(operator_client) == "drained"
    assert _node_badge(operator_client, fleet) == "Drained"
