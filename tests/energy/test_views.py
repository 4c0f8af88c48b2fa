"""The energy page, its CSV exports, the printable report and its PDF, and
`manage.py energy_report`: what a manager reads equals the report's numbers, bad input is a
clear error, and every page needs a login."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.energy.conftest import build_rig
from tests.energy.helpers import pdf_pages, teams_named_as_accounts
from tests.helpers import wait_for
from webapp.energy.carbon_services import pue_set
from webapp.energy.models import EnergyExport
from webapp.energy.selectors import month_report
from webapp.energy.services import energy_rollups_rebuild
from webapp.fleet.models import Gpu


def _csv(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_every_energy_page_needs_a_login(client, built):
    q = f"?cluster=watt&month={built['month']}"
    for url in (
        reverse("energy:cluster"),
        reverse("energy:report") + q,
        reverse("energy:report_pdf") + q,
        reverse("energy_api:csv", args=["teams"]) + q,
    ):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_energy_page_shows_the_months_figures(outsider_client, built):
    # Cluster figures, not team-scoped data: anyone logged in reads them, as on the jobs list.
    teams_named_as_accounts("llm", "vision")
    r, _ = month_report(built["cluster"], built["month"])
    response = outsider_client.get(reverse("energy:cluster"), {"month": built["month"]})
    assert response.status_code == 200
    html = response.content.decode()
    assert f"{r.gpu_kwh:.1f} kWh" in html
    assert f"{r.facility_kwh:.1f} kWh" in html
    figures = response.context["figures"]
    assert set(figures) == {
        "daily-energy",
        "daily-co2",
        "power",
        "by-team",
        "by-project",
        "by-type",
        "by-outcome",
        "trend-energy",
        "trend-co2",
        "trend-pue",
    }
    team_bars = dict(
        zip(figures["by-team"]["data"][0]["y"], figures["by-team"]["data"][0]["x"], strict=True)
    )
    assert team_bars["vision"] == pytest.approx(
        next(x.facility_kwh for x in r.by_team if x.key == "vision")
    )


def test_csv_tables_hold_the_report_and_add_up(operator_client, built):
    q = {"cluster": "watt", "month": built["month"]}
    teams_named_as_accounts("llm", "vision")
    r, _ = month_report(built["cluster"], built["month"])
    teams = _csv(operator_client.get(reverse("energy_api:csv", args=["teams"]), q))
    assert {t["key"] for t in teams} == {"llm", "vision", "(no job: idle)"}
    assert sum(float(t["gpu_kwh"]) for t in teams) == pytest.approx(r.gpu_kwh)
    projects = _csv(operator_client.get(reverse("energy_api:csv", args=["projects"]), q))
    assert {t["key"] for t in projects} == {"llm-7b", "vit-ft", "(none)"}
    assert sum(float(t["gpu_kwh"]) for t in projects) + r.idle_kwh == pytest.approx(r.gpu_kwh)
    jobs = _csv(operator_client.get(reverse("energy_api:csv", args=["jobs"]), q))
    assert [j["key"] for j in jobs] == [x.key for x in r.top_jobs]
    days = _csv(operator_client.get(reverse("energy_api:csv", args=["days"]), q))
    assert sum(float(d["facility_kwh"]) for d in days) == pytest.approx(r.facility_kwh)
    for table in ("job-types", "outcomes", "users", "summary", "report"):
        response = operator_client.get(reverse("energy_api:csv", args=[table]), q)
        assert response.status_code == 200 and len(_csv(response)) >= 1, table


def test_bad_month_and_empty_month_are_clear_errors(operator_client, built):
    response = operator_client.get(reverse("energy:cluster"), {"month": "2026-13"})
    assert response.status_code == 400
    assert "month: month must be YYYY-MM" in response.content.decode()
    response = operator_client.get(reverse("energy:cluster"), {"month": "2001-01"})
    assert "no energy data for cluster watt" in response.content.decode()
    response = operator_client.get(
        reverse("energy_api:csv", args=["teams"]), {"cluster": "watt", "month": "2001-01"}
    )
    assert response.status_code == 404 and b"no energy data" in response.content
    response = operator_client.get(reverse("energy:report"), {"cluster": "nope"})
    assert response.status_code == 400 and b"unknown cluster" in response.content


def test_command_prints_csv_and_json_and_refuses_an_empty_month(built, capsys):
    r, _ = month_report(built["cluster"], built["month"])
    call_command("energy_report", cluster="watt", month=built["month"], format="csv")
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    total = next(x for x in rows if x["section"] == "total")
    assert float(total["facility_kwh"]) == pytest.approx(r.facility_kwh)
    assert sum(float(x["facility_kwh"]) for x in rows if x["section"] == "team") + float(
        next(x for x in rows if x["section"] == "idle")["facility_kwh"]
    ) + r.unattributed_facility_kwh == pytest.approx(r.facility_kwh)
    call_command("energy_report", cluster="watt", month=built["month"], format="json")
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["gpu_kwh"] == pytest.approx(r.gpu_kwh)
    assert data["previous_month"] is None
    with pytest.raises(CommandError, match="no energy data for cluster watt"):
        call_command("energy_report", cluster="watt", month="2001-01", format="csv")
    with pytest.raises(CommandError, match="--month: month must be YYYY-MM"):
        call_command("energy_report", cluster="watt", month="11-2026", format="csv")
    with pytest.raises(CommandError, match="no cluster 'nope'"):
        call_command("energy_report", cluster="nope", month=built["month"])


def test_pdf_is_printed_by_a_worker_and_served_once_made(
    transactional_db, worker_factory, operator_client, tmp_path
):
    built = build_rig()
    q = {"cluster": "watt", "month": built["month"]}
    # No Chromium in the web worker: the page says the PDF is being made and polls.
    first = operator_client.get(reverse("energy:report_pdf"), q)
    assert first.status_code == 202 and "being made" in first.content.decode()
    assert 'http-equiv="refresh"' in first.content.decode()
    assert operator_client.get(reverse("energy:report_pdf"), q).status_code == 202
    assert EnergyExport.objects.filter(kind="report_pdf").count() == 1  # asked twice, made once
    worker_factory()
    assert wait_for(
        lambda: EnergyExport.objects.get(kind="report_pdf").status == "done", timeout=90
    )
    response = operator_client.get(reverse("energy:report_pdf"), q)
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert pdf_pages(response.content, tmp_path) == 5
    info = subprocess.run(
        ["pdfinfo", "-"], input=response.content, capture_output=True, check=True
    ).stdout.decode()
    assert "595 x 842" in info or "594.96 x 841.92" in info  # A4 in points
    assert EnergyExport.objects.filter(kind="report_pdf").count() == 1
    out = tmp_path / "cli.pdf"
    call_command("energy_report", cluster="watt", month=built["month"], format="pdf", output=out)
    assert out.read_bytes().startswith(b"%PDF")


def _page_report(client, built):
    response = client.get(reverse("energy:cluster"), {"cluster": "watt", "month": built["month"]})
    assert response.status_code == 200
    return response.context["r"]


def test_the_months_report_is_reused_until_its_rollup_or_carbon_inputs_change(
    operator_client, built
):
    q = {"cluster": "watt", "month": built["month"]}
    first = _page_report(operator_client, built)
    with CaptureQueriesContext(connection) as ctx:
        again = _page_report(operator_client, built)
        teams = _csv(operator_client.get(reverse("energy_api:csv", args=["teams"]), q))
    assert again.gpu_kwh == first.gpu_kwh
    assert sum(float(t["gpu_kwh"]) for t in teams) == pytest.approx(first.gpu_kwh)
    assert [x["sql"][:80] for x in ctx.captured_queries if "energyhour" in x["sql"]] == []
    # One GPU's samples are taken out and the month's rollup rebuilt: the page follows.
    gpu = Gpu.objects.filter(node__cluster=built["cluster"]).order_by("id").first()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM telemetry_gpusample WHERE gpu_id = %s", [gpu.id])
    energy_rollups_rebuild(built["cluster"].id, built["lo"], built["hi"])
    fewer = _page_report(operator_client, built)
    assert fewer.gpu_kwh < first.gpu_kwh
    assert fewer.gpu_kwh == pytest.approx(month_report(built["cluster"], built["month"])[0].gpu_kwh)
    # A measured PUE from the month's start: the facility energy follows at once.
    pue_set(built["cluster"], built["lo"], 2.0, "measured", "test meter")
    r = _page_report(operator_client, built)
    assert r.facility_kwh == pytest.approx(2.0 * r.it_kwh)
    assert r.facility_kwh != pytest.approx(fewer.facility_kwh)


def test_job_page_shows_facility_energy_and_co2e_beside_gpu_energy(operator_client, built):
    r, _ = month_report(built["cluster"], built["month"])
    line = next(x for x in r.top_jobs if x.key == "2")
    response = operator_client.get(reverse("jobs:detail", args=[built["jobs"]["2"].pk]))
    html = response.content.decode()
    assert f'id="facility-energy">{line.facility_kwh:.3f} kWh' in html
    assert f'id="job-co2e">{line.co2e_location_kg:.2f} kg' in html


def test_command_rebuilds_a_months_rollup_from_raw_samples(built, capsys):
    from webapp.energy.models import GpuEnergyHour, JobEnergyHour

    r, _ = month_report(built["cluster"], built["month"])
    GpuEnergyHour.objects.all().delete()
    JobEnergyHour.objects.all().delete()
    call_command("energy_report", cluster="watt", month=built["month"], format="json", rebuild=True)
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["gpu_kwh"] == pytest.approx(r.gpu_kwh, rel=1e-9)
    assert data["totals"]["lost_kwh"] == pytest.approx(r.lost_kwh, rel=1e-9)
