"""Reference §8's CSV: one row per day x team x account x project x job type, built by a Celery
task as a persisted export row and delivered as a link (on the page, and by email to who asked).
Its rows add up to the monthly report's figures; a redelivered task builds nothing twice."""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.alerts.conftest import text_of, with_email
from tests.energy import rig
from tests.energy.conftest import build_rig
from tests.energy.helpers import teams_named_as_accounts
from tests.helpers import wait_for
from webapp.energy.daily import DAILY_COLUMNS
from webapp.energy.exports import EXPORT_STALE, EXPORT_UNSENT
from webapp.energy.models import EnergyExport
from webapp.energy.selectors import month_report
from webapp.energy.services import (
    energy_rollups_rebuild,
    export_build,
    export_file,
    export_request,
    exports_resend,
)
from webapp.energy.trends import IDLE_KEY


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def test_daily_csv_rows_add_up_to_the_report(
    built, operator, operator_client, smtp, settings, django_capture_on_commit_callbacks
):
    settings.VIGIL_BASE_URL = "http://vigil.example.org"
    teams_named_as_accounts("llm", "vision")
    with_email(operator, "ops@example.org")
    with django_capture_on_commit_callbacks(execute=False) as queued:
        export = export_request(built["cluster"], built["month"], operator)
    assert len(queued) == 1 and export.status == "pending"  # the task is sent on commit
    done = export_build(export.pk)
    assert done.status == "done" and done.emailed_to == "ops@example.org"
    assert export_build(export.pk) is None  # claimed: a redelivered task builds nothing
    rows = _rows(export_file(done))
    assert list(rows[0]) == list(DAILY_COLUMNS) and len(rows) == done.rows
    keys = [(x["day"], x["team"], x["account"], x["project"], x["job_type"]) for x in rows]
    assert len(keys) == len(set(keys))
    assert {x["day"] for x in rows} == {f"{built['t0']:%Y-%m-%d}"}  # the rig's six hours
    # Each job's project (Slurm: its account), "(none)" as on the page for a job without one,
    # empty for the idle GPUs (no job).
    assert {(x["team"], x["project"], x["job_type"]) for x in rows} == {
        ("llm", "llm-7b", "pretrain"),
        ("vision", "vit-ft", "sft"),
        ("vision", "(none)", "eval"),
        (IDLE_KEY, "", ""),
    }
    r, _ = month_report(built["cluster"], built["month"])
    # Each value is rounded to its unit's resolution (1e-6 of a kWh, kg, hour): a sum of the
    # rows is within half of that per row of the report's figure.
    rounded = len(rows) * 1e-6

    def total(col, team=None):
        return sum(float(x[col]) for x in rows if team is None or x["team"] == team)

    assert total("gpu_kwh") == pytest.approx(r.gpu_kwh, abs=rounded)
    assert total("facility_kwh") + r.unattributed_facility_kwh == pytest.approx(
        r.facility_kwh, abs=rounded
    )
    assert total("co2e_location_kg") == pytest.approx(r.co2e_location_kg, rel=1e-6)
    assert total("gpu_hours") == pytest.approx(r.gpu_hours, abs=rounded)
    assert total("it_kwh_measured") + total("it_kwh_estimated") == pytest.approx(r.it_kwh, rel=1e-6)
    assert total("it_kwh_measured") == pytest.approx(r.it_kwh_measured, rel=1e-6)
    assert total("gpu_kwh_measured") == pytest.approx(r.gpu_kwh_by_method["counter"], abs=rounded)
    for line in r.by_team:
        assert total("facility_kwh", line.key) == pytest.approx(line.facility_kwh, abs=rounded)
    assert total("gpu_kwh", IDLE_KEY) == pytest.approx(r.idle_kwh, abs=rounded)
    by_type = defaultdict(float)
    for x in rows:
        if x["team"] != IDLE_KEY:
            by_type[x["job_type"]] += float(x["gpu_kwh"])
    assert by_type == pytest.approx({x.key: x.gpu_kwh for x in r.by_type}, abs=rounded)
    # Idle energy: the idle GPUs' row whole, and the allocated-but-idle part of the jobs.
    assert total("idle_kwh") == pytest.approx(r.idle_kwh + r.wasted_kwh, abs=rounded)
    assert [float(x["pue"]) for x in rows] == pytest.approx([1.58] * len(rows))
    assert {x["method_version"] for x in rows} == {r.method_version}
    # The link, by email, and the download behind it (login required).
    [msg] = smtp.to("ops@example.org")
    url = re.search(
        r"http://vigil.example.org(/api/v1/energy/exports/\d+\.csv)", text_of(msg)
    ).group(1)
    response = operator_client.get(url)
    assert response.status_code == 200 and response.content == export_file(done)
    assert "attachment" in response["Content-Disposition"]


def test_an_export_left_running_by_a_dead_worker_is_built_when_its_task_comes_again(built):
    # A worker's lease lasts EXPORT_STALE from its claim: the dead one's ran out.
    started, now = timezone.now() - EXPORT_STALE - timedelta(minutes=1), timezone.now()
    lost = EnergyExport.objects.create(
        cluster=built["cluster"],
        month=built["month"],
        status="running",
        started_at=started,
        lease_until=started + EXPORT_STALE,
    )
    busy = EnergyExport.objects.create(
        cluster=built["cluster"],
        month=built["month"],
        status="running",
        started_at=now,
        lease_until=now + EXPORT_STALE,
    )
    assert export_build(busy.pk) is None  # another worker is building it now
    done = export_build(lost.pk)
    assert done.status == "done" and done.rows > 0 and _rows(export_file(done))


def test_an_export_whose_task_was_lost_is_built_when_the_sweep_sends_it_again(
    transactional_db, worker_factory
):
    built = build_rig()
    # Rows whose task never reached the broker (it was down when the request committed).
    lost = EnergyExport.objects.create(cluster=built["cluster"], month=built["month"])
    EnergyExport.objects.filter(pk=lost.pk).update(
        created_at=timezone.now() - EXPORT_UNSENT - timedelta(seconds=30)
    )
    recent = EnergyExport.objects.create(cluster=built["cluster"], month=built["month"])
    worker_factory()
    assert exports_resend() == 1  # the recent one's own task may still be on its way
    assert wait_for(lambda: EnergyExport.objects.get(pk=lost.pk).status == "done", timeout=60)
    assert EnergyExport.objects.get(pk=lost.pk).rows > 0
    assert EnergyExport.objects.get(pk=recent.pk).status == "pending"
    assert exports_resend() == 0  # a built export is not sent again


def test_an_empty_month_fails_with_the_reason_and_a_pending_one_is_not_served(
    built, operator, operator_client
):
    pending = EnergyExport.objects.create(cluster=built["cluster"], month=built["month"])
    response = operator_client.get(reverse("energy_api:export_download", args=[pending.pk]))
    assert response.status_code == 409 and b"pending" in response.content
    empty = EnergyExport.objects.create(cluster=built["cluster"], month="2001-01")
    failed = export_build(empty.pk)
    assert failed.status == "failed" and "no energy data for cluster watt" in failed.error
    response = operator_client.get(reverse("energy_api:export_download", args=[empty.pk]))
    assert response.status_code == 404 and b"no energy data" in response.content
    with pytest.raises(ValueError, match="YYYY-MM"):
        export_request(built["cluster"], "2026-13", operator)
    response = operator_client.post(reverse("energy:export_create"), {"month": "2026-13"})
    assert response.status_code == 400
    assert EnergyExport.objects.count() == 2


def test_the_page_asks_a_worker_for_the_csv_and_links_it(
    transactional_db, worker_factory, operator, operator_client, client
):
    built = build_rig()
    worker_factory()
    q = f"cluster={rig.CLUSTER}&month={built['month']}"
    response = operator_client.post(
        reverse("energy:export_create"), {"cluster": rig.CLUSTER, "month": built["month"]}
    )
    assert response.status_code == 302 and response["Location"].endswith(f"?{q}#exports")
    export = EnergyExport.objects.get()
    assert export.requested_by == operator
    assert wait_for(lambda: EnergyExport.objects.get().status == "done", timeout=60)
    page = operator_client.get(f"{reverse('energy:cluster')}?{q}").content.decode()
    link = reverse("energy_api:export_download", args=[export.pk])
    assert f'href="{link}"' in page
    rows = _rows(operator_client.get(link).content)
    assert len(rows) == EnergyExport.objects.get().rows > 0
    client.logout()
    assert client.get(link).status_code == 302  # a login first


def test_asking_again_for_a_months_csv_reuses_its_export_until_the_data_changes(
    built, operator, operator_client
):
    def ask(month: str = built["month"]) -> None:
        response = operator_client.post(
            reverse("energy:export_create"), {"cluster": rig.CLUSTER, "month": month}
        )
        assert response.status_code == 302

    ask()
    ask()
    assert EnergyExport.objects.count() == 1  # the pending one is the answer to both
    export_build(EnergyExport.objects.get().pk)
    ask()
    assert EnergyExport.objects.count() == 1  # built from the same data: the same file
    # The month's rollup is rewritten: the next ask builds a new file.
    energy_rollups_rebuild(built["cluster"].id, built["lo"], built["hi"])
    ask()
    assert EnergyExport.objects.count() == 2
    ask("2001-01")  # another month is another file
    assert EnergyExport.objects.count() == 3


def test_exports_older_than_their_retention_are_pruned(built, operator_client, settings):
    from webapp.celery import app
    from webapp.energy.tasks import prune_exports

    settings.VIGIL_ENERGY_EXPORT_RETENTION_DAYS = 30
    old = EnergyExport.objects.create(cluster=built["cluster"], month=built["month"])
    export_build(old.pk)
    EnergyExport.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=31))
    recent = EnergyExport.objects.create(cluster=built["cluster"], month="2001-01")
    assert prune_exports() == {"pruned": 1}
    assert list(EnergyExport.objects.values_list("pk", flat=True)) == [recent.pk]
    gone = operator_client.get(reverse("energy_api:export_download", args=[old.pk]))
    assert gone.status_code == 404
    assert "vigil.energy.prune_exports" in {e["task"] for e in app.conf.beat_schedule.values()}
