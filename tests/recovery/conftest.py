"""Recovery fixtures: the failures app's two-node fleet (its failures diagnosed through the
real services), and each cluster's recovery policy set as a test needs it."""

from __future__ import annotations

import pytest

from tests.failures.conftest import CLUSTER, Fleet, make_fleet
from webapp.fleet.models import Cluster
from webapp.recovery.services import recovery_policy_set


@pytest.fixture
def fleet(db) -> Fleet:
    return make_fleet()


def policy(mode: str, executor: str = "simulated") -> None:
    recovery_policy_set(Cluster.objects.get(name=CLUSTER).pk, mode=mode, executor=executor)
