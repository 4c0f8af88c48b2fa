"""The beat's energy task in a real Celery worker: sent by name, as beat sends it, it
accounts the rig's ended hours."""

from __future__ import annotations

import pytest

from tests.energy import rig
from tests.helpers import wait_for
from webapp.celery import app
from webapp.energy.models import GpuEnergyHour, JobEnergyHour


@pytest.fixture
def committed_rig(transactional_db):
    t0 = rig.start_time()
    rig.build(t0)
    return t0


def test_refresh_task_in_a_worker_accounts_the_ended_hours(worker_factory, committed_rig):
    worker_factory()
    app.send_task("vigil.energy.refresh_rollups", queue="default")
    assert wait_for(lambda: GpuEnergyHour.objects.count() >= 8 * rig.HOURS)
    assert wait_for(lambda: JobEnergyHour.objects.values("hour").distinct().count() == rig.HOURS)
