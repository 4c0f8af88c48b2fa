"""Energy accounting over compacted GPU-hours equals the same over raw ones: the rig's samples
are written raw and accounted, then every hour is compacted (webapp/telemetry/compaction.py,
raw rows deleted) and the energy recomputed from the packed rows: the same joules, by method,
per GPU, hour and job (sources.py reads through telemetry's one reader)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from tests.energy import rig
from webapp.energy.models import GpuEnergyHour
from webapp.energy.selectors import energy_report
from webapp.energy.services import energy_rollups_rebuild
from webapp.fleet.models import Gpu
from webapp.telemetry.compaction import gpu_hours_compact

_COLUMNS = ("gpu_id", "hour", "job_id", "counter_j", "integrated_j", "model_j", "covered_s",
            "idle_j", "idle_s", "samples", "hour_samples")  # fmt: skip


def _rows() -> list[tuple]:
    return sorted(GpuEnergyHour.objects.values_list(*_COLUMNS), key=lambda r: r[:3])


def _raw_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def test_energy_from_compacted_hours_equals_energy_from_raw(built):
    raw_rows = _rows()
    raw_report = energy_report(built["cluster"], built["lo"], built["hi"])
    assert len(raw_rows) >= 8 * rig.HOURS and raw_report.gpu_kwh > 0
    ids = list(Gpu.objects.filter(node__cluster=built["cluster"]).values_list("id", flat=True))
    moved = sum(gpu_hours_compact(ids, built["t0"] + timedelta(hours=h)) for h in range(rig.HOURS))
    assert moved > 0 and _raw_samples() == 0  # every sample now lives packed only
    GpuEnergyHour.objects.all().delete()
    energy_rollups_rebuild(built["cluster"].id, built["lo"], built["hi"])
    packed_rows = _rows()
    # Same rows, same joules: float32 samples read bit-exactly, the same arithmetic.
    assert [r[:3] for r in packed_rows] == [r[:3] for r in raw_rows]
    for a, b in zip(packed_rows, raw_rows, strict=True):
        assert a[3:] == pytest.approx(b[3:], rel=1e-12, abs=1e-9), a[:3]
    packed_report = energy_report(built["cluster"], built["lo"], built["hi"])
    assert packed_report.gpu_kwh == pytest.approx(raw_report.gpu_kwh, rel=1e-12)
    assert packed_report.gpu_kwh_by_method == pytest.approx(raw_report.gpu_kwh_by_method)
    assert packed_report.facility_kwh == pytest.approx(raw_report.facility_kwh, rel=1e-12)
    assert packed_report.wasted_kwh == pytest.approx(raw_report.wasted_kwh, rel=1e-12)
    # And still the true energy (the rig's independent sums).
    exp = rig.expected(built["t0"], built["lo"], built["hi"])
    assert packed_report.gpu_kwh == pytest.approx(exp.gpu_kwh, rel=1e-6)
