"""The hourly energy rollup and the monthly report against figures computed independently
from the samples the rig sent: jobs, teams, types, outcomes, idle,
wasted and lost energy, node IT energy, and parts that add up to the totals."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from tests.energy import rig
from webapp.energy.models import GpuEnergyHour
from webapp.energy.selectors import NoEnergyData, energy_report, month_bounds, month_report
from webapp.energy.services import energy_rollups_refresh

REL = 1e-6  # the rollup and the independent sums add the same numbers in another order


def test_refresh_accounts_every_gpu_hour_once_and_again_changes_nothing(built):
    # 8 GPUs x 6 hours.
    assert built["refresh"].gpu_hours == 8 * rig.HOURS
    before = list(GpuEnergyHour.objects.order_by("id").values_list("gpu_id", "hour", "counter_j"))
    assert energy_rollups_refresh().gpu_hours == 0
    after = list(GpuEnergyHour.objects.order_by("id").values_list("gpu_id", "hour", "counter_j"))
    assert after == before


def test_report_numbers_equal_an_independent_computation(built):
    exp = rig.expected(built["t0"], built["lo"], built["hi"])
    r = energy_report(built["cluster"], built["lo"], built["hi"])
    assert r.gpu_kwh == pytest.approx(exp.gpu_kwh, rel=REL)
    jobs = {line.key: line for line in r.top_jobs}
    for sid, kwh in exp.by_job.items():
        assert jobs[sid].gpu_kwh == pytest.approx(kwh, rel=REL)
        assert jobs[sid].gpu_hours == pytest.approx(exp.job_hours[sid], rel=REL)
    # The rig's `team` is the job's account: no Team rule here, so one "(no team)" row.
    assert {line.key: line.gpu_kwh for line in r.by_account} == pytest.approx(exp.by_team, rel=REL)
    assert [(x.key, x.gpu_kwh) for x in r.by_team] == [
        ("(no team)", pytest.approx(sum(exp.by_team.values()), rel=REL))
    ]
    assert {line.key: line.gpu_kwh for line in r.by_project} == pytest.approx(
        exp.by_project, rel=REL
    )
    assert set(exp.by_project) == {"llm-7b", "vit-ft", "(none)"}
    assert {line.key: line.gpu_kwh for line in r.by_type} == pytest.approx(exp.by_type, rel=REL)
    assert {line.key: line.gpu_kwh for line in r.by_outcome} == pytest.approx(
        exp.by_outcome, rel=REL
    )
    assert r.idle_kwh == pytest.approx(exp.idle_kwh, rel=REL)
    assert r.wasted_kwh == pytest.approx(exp.wasted_kwh, rel=REL)
    assert r.wasted_gpu_hours == pytest.approx(2.0, rel=1e-3)  # job 2's last hour, two GPUs
    assert r.lost_kwh == pytest.approx(exp.lost_kwh, rel=REL)
    assert r.lost_gpu_hours == pytest.approx(1.0)  # two GPUs x half an hour since checkpoint
    # Node a's IPMI is measured; node b is modelled as 1.5 x its GPUs (no power profile).
    assert r.it_kwh_measured == pytest.approx(exp.ipmi_kwh, rel=REL)
    assert r.it_kwh == pytest.approx(exp.ipmi_kwh + 1.5 * exp.b_gpu_kwh, rel=REL)
    assert r.facility_kwh == pytest.approx(r.it_kwh * 1.58, rel=REL)  # default PUE, assumed
    assert r.pue_periods[0].basis == "assumed"
    # Only b3 had no counter, and the reset and the implausible read fell back to power.
    # Fallback intervals: all of b3's, a0's reload interval and a1's two around its bad read
    # (job 1 draws 350 W).
    fallback_kwh = exp.counter_free_kwh + 3 * 350 * rig.STEP_S / 3.6e6
    assert r.gpu_kwh_by_method["integrated"] == pytest.approx(fallback_kwh, rel=REL)
    assert r.gpu_kwh_by_method["model"] == 0
    assert 0.8 < r.measured_share < 1
    # Every GPU-hour had samples until the rig stopped sending (b2's outage was measured by
    # its counter); since then the GPUs are silent, which counts against completeness.
    end = built["t0"] + timedelta(hours=rig.HOURS)
    at_end = energy_report(built["cluster"], built["lo"], built["hi"], now=end)
    assert at_end.completeness == pytest.approx(1.0, abs=0.01)
    # An hour and a half later, the one hour that has ended since is expected and was silent
    # (the hour under way is not expected: the rollup accounts it once it ends).
    later = energy_report(
        built["cluster"], built["lo"], built["hi"], now=end + timedelta(hours=1.5)
    )
    assert later.completeness == pytest.approx(rig.HOURS / (rig.HOURS + 1), rel=0.01)


def test_report_parts_add_up_to_its_totals(built):
    r = energy_report(built["cluster"], built["lo"], built["hi"])
    for lines in (r.by_team, r.by_account, r.by_project, r.by_type, r.by_outcome, r.by_user):
        assert sum(x.gpu_kwh for x in lines) + r.idle_kwh == pytest.approx(r.gpu_kwh, rel=REL)
        assert sum(x.facility_kwh for x in lines) + r.idle_line.facility_kwh + (
            r.unattributed_facility_kwh
        ) == pytest.approx(r.facility_kwh, rel=REL)
        assert sum(x.co2e_location_kg for x in lines) + r.idle_line.co2e_location_kg == (
            pytest.approx(r.co2e_location_kg, rel=1e-3)
        )
    assert sum(d.facility_kwh for d in r.days) == pytest.approx(r.facility_kwh, rel=REL)
    assert r.co2e_location_kg == pytest.approx(r.facility_kwh * r.intensity_g_per_kwh / 1000)
    assert r.co2e_market_kg == pytest.approx(r.co2e_location_kg)  # no market factor set


def test_a_late_spool_replay_is_folded_in_without_double_counting(built):
    r0 = energy_report(built["cluster"], built["lo"], built["hi"])
    with connection.cursor() as cur:
        cur.execute("UPDATE energy_gpuenergyhour SET hour_samples = hour_samples - 1")
    # Every GPU-hour now looks stale: recomputed from the same raw samples, same totals.
    assert energy_rollups_refresh().gpu_hours == 8 * rig.HOURS
    r1 = energy_report(built["cluster"], built["lo"], built["hi"])
    assert r1.gpu_kwh == pytest.approx(r0.gpu_kwh, rel=1e-12)


def test_a_month_without_data_is_a_clear_error(built):
    with pytest.raises(NoEnergyData, match="no energy data for cluster watt"):
        month_report(built["cluster"], "2001-01")
    with pytest.raises(ValueError, match="YYYY-MM"):
        month_bounds("2026-13")
    report, previous = month_report(built["cluster"], f"{built['t0']:%Y-%m}")
    assert report.gpu_kwh > 0 and previous is None


def test_measured_pue_and_a_market_factor_are_used_and_named(built):
    from webapp.energy.models import MarketFactorPeriod, PuePeriod

    PuePeriod.objects.create(
        cluster=built["cluster"], since=built["lo"], value=1.2, basis="measured", source="BMS"
    )
    MarketFactorPeriod.objects.create(
        cluster=built["cluster"], since=built["lo"], kg_per_kwh=0.0, source="PPA 2026"
    )
    r = energy_report(built["cluster"], built["lo"], built["hi"])
    assert r.facility_kwh == pytest.approx(r.it_kwh * 1.2, rel=REL)
    assert [(p.value, p.basis, p.source) for p in r.pue_periods] == [(1.2, "measured", "BMS")]
    assert r.co2e_market_kg == 0 and r.co2e_location_kg > 0
    assert r.market_source == "PPA 2026"


def test_an_hour_is_accounted_once_it_has_ended(built):
    GpuEnergyHour.objects.all().delete()
    during_hour_3 = built["t0"] + timedelta(hours=3, minutes=30)
    assert energy_rollups_refresh(now=during_hour_3).gpu_hours == 8 * 3
    assert GpuEnergyHour.objects.filter(hour__gte=built["t0"] + timedelta(hours=3)).count() == 0
    # Later runs add the hours that ended since, and only those.
    assert energy_rollups_refresh().gpu_hours == 8 * (rig.HOURS - 3)
    r = energy_report(built["cluster"], built["lo"], built["hi"])
    assert r.gpu_kwh == pytest.approx(rig.expected(built["t0"], built["lo"], built["hi"]).gpu_kwh)
