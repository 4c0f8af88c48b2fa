"""A job's energy has one home (energy.selectors.job_energy) and one figure set on its page:
the hours the hourly rollup has accounted (GPU, facility, CO2e) and, after them, the GPU energy
live from the energy counters, with one method line saying which hours are which."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from tests.energy import rig
from webapp.energy.job_energy import job_energy
from webapp.energy.models import GpuEnergyHour, JobEnergyHour
from webapp.energy.selectors import month_report
from webapp.jobs.models import JobAllocation

J_PER_KWH = 3.6e6


def test_an_ended_job_all_accounted_is_the_reports_line(built):
    job = built["jobs"]["2"]
    energy = job_energy(job)
    r, _ = month_report(built["cluster"], built["month"])
    line = next(x for x in r.top_jobs if x.key == "2")
    assert energy.accounted_until == built["t0"] + timedelta(hours=4)
    assert energy.live_gpu_kwh == 0
    assert energy.gpu_kwh == pytest.approx(line.gpu_kwh)
    assert energy.facility_kwh == pytest.approx(line.facility_kwh)
    assert sum(e.kwh for e in energy.per_gpu) == pytest.approx(line.gpu_kwh)
    assert "accounted by the hourly energy rollup" in energy.method
    assert "live" not in energy.method


def test_the_job_page_shows_accounted_hours_and_live_ones_as_one_job_energy(operator_client, built):
    """Job 2's last hour (3 h to 4 h) not yet accounted: its GPU energy is the accounted
    hours' plus that hour's counter deltas, its facility energy the accounted hours'."""
    t0, job = built["t0"], built["jobs"]["2"]
    last = t0 + timedelta(hours=3)
    GpuEnergyHour.objects.filter(job=job, hour=last).delete()
    JobEnergyHour.objects.filter(job=job, hour=last).delete()
    accounted_j = sum(
        h.counter_j + h.integrated_j + h.model_j for h in JobEnergyHour.objects.filter(job=job)
    )
    # Live: the counter's deltas over the readings from 3 h to 4 h on b0 and b1 (clean).
    live_mj = 0.0
    for gpu in (0, 1):
        counter = rig.counter_mj("b", gpu)
        live_mj += counter[4 * rig.H] - counter[3 * rig.H]
    total_kwh = accounted_j / J_PER_KWH + live_mj / 1e3 / J_PER_KWH

    response = operator_client.get(reverse("jobs:detail", args=[job.pk]))
    html = response.content.decode()
    # One name, one method line, saying which hours are accounted and which are live.
    assert "Facility energy" not in html and "GPU energy" not in html
    assert html.count('id="energy-method"') == 1
    method = html.split('id="energy-method">')[1].split("</p>")[0]
    assert f"hours up to {last:%Y-%m-%d %H:%M} UTC accounted by the hourly energy rollup" in method
    assert f"since {last:%H:%M} UTC, live" in method and "energy-counter deltas" in method
    energy = response.context["energy"]
    assert energy.accounted_until == last
    assert energy.kwh == pytest.approx(total_kwh)
    assert sum(e.kwh for e in energy.per_gpu) == pytest.approx(total_kwh)
    assert f'id="energy-total">{total_kwh:.3f} kWh' in html
    assert f'id="facility-energy">{energy.facility_kwh:.3f} kWh' in html


def test_a_gpu_held_twice_splits_its_accounted_hours_between_its_allocations(built):
    """Job 2 held b0 again from 3 h (a requeue on the same GPU): hours 1 and 2 are the first
    allocation's, hour 3 the second's; the job's total does not move."""
    t0, job = built["t0"], built["jobs"]["2"]
    before = job_energy(job)
    first = JobAllocation.objects.get(job=job, gpu_index=0)
    JobAllocation.objects.create(
        job=job,
        node=first.node,
        gpu=first.gpu,
        gpu_index=0,
        start=t0 + timedelta(hours=3),
        end=first.end,
    )
    first.end = t0 + timedelta(hours=3)
    first.save(update_fields=["end"])
    rows = GpuEnergyHour.objects.filter(job=job, gpu=first.gpu)
    hour_j = {r.hour: r.counter_j + r.integrated_j + r.model_j for r in rows}
    energy = job_energy(job)
    by_alloc = {e.allocation.id: e.accounted_j for e in energy.per_gpu}
    second = JobAllocation.objects.filter(job=job, gpu_index=0).exclude(pk=first.pk).get()
    third_hour = t0 + timedelta(hours=3)
    assert by_alloc[second.id] == pytest.approx(hour_j[third_hour])
    assert by_alloc[first.id] == pytest.approx(sum(hour_j.values()) - hour_j[third_hour])
    assert energy.gpu_kwh == pytest.approx(before.gpu_kwh)
    assert sum(e.kwh for e in energy.per_gpu) == pytest.approx(before.gpu_kwh)
