"""Energy fixtures: the rig's cluster (tests/energy/rig.py) ingested, accounted and
described; the real SMTP server of the alerts tests."""

from __future__ import annotations

import pytest

from tests.alerts.conftest import smtp  # noqa: F401  (a fixture: the real aiosmtpd server)
from tests.energy import rig
from webapp.energy.selectors import month_bounds
from webapp.energy.services import energy_rollups_refresh
from webapp.fleet.models import Cluster


def build_rig() -> dict:
    t0 = rig.start_time()
    jobs = rig.build(t0)
    result = energy_rollups_refresh()
    cluster = Cluster.objects.get(name=rig.CLUSTER)
    month = f"{t0:%Y-%m}"
    lo, hi = month_bounds(month)
    return {
        "t0": t0,
        "jobs": jobs,
        "refresh": result,
        "cluster": cluster,
        "month": month,
        "lo": lo,
        "hi": hi,
    }


@pytest.fixture
def built(db) -> dict:
    return build_rig()
