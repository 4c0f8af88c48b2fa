"""A month's export built by a worker: the daily CSV (one row per day, team, account, project and
job type; delivered as a link) or the printed report (the PDF). A request returns the export
that already answers it; the build claims its row with a lease; lost builds are sent again
and old exports pruned."""

from __future__ import annotations

import gzip
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from webapp.celery import app
from webapp.core import mail, workrows
from webapp.core.exports import csv_response
from webapp.energy.models import (
    EnergyExport,
)
from webapp.energy.selectors import (
    REPORT_CACHE_OPEN_S,
    NoEnergyData,
    data_version,
    month_bounds,
    months_ending,
)
from webapp.failures.services import retention_days
from webapp.fleet.models import Cluster


def export_months(month: str, kind: str) -> list[str]:
    """The months an export's file is computed from: the daily CSV its month; the report PDF
    its trends' twelve (the previous month, for the comparisons, among them)."""
    from webapp.energy.trends import TREND_MONTHS

    if kind == EnergyExport.Kind.REPORT_PDF:
        return months_ending(month, TREND_MONTHS)
    return [month]


# A failed build is the answer for this long (Chromium missing, a month without data): the
# page polling a failed PDF does not start a build on every poll.
EXPORT_RETRY_AFTER = timedelta(minutes=2)


def _export_current(cluster: Cluster, month: str, kind: str, now: datetime) -> EnergyExport | None:
    """The export that already answers a request: one pending or being built (it reads the
    data when it runs), one built from the data as it is now, or one that failed moments ago."""
    _lo, hi = month_bounds(month)
    version = data_version(cluster, export_months(month, kind))
    built = Q(status=EnergyExport.Status.DONE, data_version=version)
    if hi > now:
        # The month is still going: its "so far" figures move with the clock as well.
        built &= Q(finished_at__gte=now - timedelta(seconds=REPORT_CACHE_OPEN_S))
    recent_failure = Q(status=EnergyExport.Status.FAILED, finished_at__gte=now - EXPORT_RETRY_AFTER)
    return (
        EnergyExport.objects.filter(cluster=cluster, month=month, kind=kind)
        .filter(
            Q(status__in=[EnergyExport.Status.PENDING, EnergyExport.Status.RUNNING])
            | built
            | recent_failure
        )
        .defer("file_gz")
        .order_by("-created_at", "-id")
        .first()
    )


def export_request(
    cluster: Cluster, month: str, user=None, kind: str = EnergyExport.Kind.DAILY_CSV
) -> EnergyExport:
    """The month's export of this kind: the one already pending, built from today's data or
    just failed; else a new pending row, which the worker builds once this transaction
    commits. Asking again never builds another file from the same data."""
    month_bounds(month)  # ValueError on a bad month, before anything is written
    if kind not in EnergyExport.Kind.values:
        raise ValueError(f"kind must be one of {', '.join(EnergyExport.Kind.values)}, got {kind!r}")
    with transaction.atomic():
        # Two requests at once: the second waits here and finds the first one's row.
        Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
        current = _export_current(cluster, month, kind, timezone.now())
        if current is not None:
            return current
        export = EnergyExport.objects.create(
            cluster=cluster, month=month, kind=kind, requested_by=user
        )
    transaction.on_commit(lambda: app.send_task(BUILD_EXPORT_TASK, args=[export.pk]), robust=True)
    return export


BUILD_EXPORT_TASK = "vigil.energy.build_export"  # tasks.build_export
# A running export older than this was left by a worker that died.
EXPORT_STALE = timedelta(minutes=10)
# A pending export older than this lost its task (the broker was down at commit, or the
# message was lost): the sweep sends it again. Builds take under a second, so a pending row
# of two minutes has waited on a busy queue at worst, and its second task then builds nothing.
EXPORT_UNSENT = timedelta(minutes=2)
EXPORTS_RESENT_PER_RUN = 100


# A pending export is claimed; one whose worker died building it (no build takes
# EXPORT_STALE: a month's CSV takes under a second, bench/energy_report.py daily_csv_s, and
# Chromium is stopped after report.PDF_TIMEOUT_S) is claimed again once its lease is over.
EXPORT_LEASE = workrows.LeaseSpec(
    EnergyExport,
    claimable=(EnergyExport.Status.PENDING,),
    running=EnergyExport.Status.RUNNING,
    started="started_at",
)


def exports_resend(now: datetime | None = None) -> int:
    """Send the build task again for exports pending past EXPORT_UNSENT or left running past
    EXPORT_STALE, oldest first, at most EXPORTS_RESENT_PER_RUN a run. Safe to repeat: the
    build claims its row. Returns how many were sent."""
    now = now or timezone.now()
    lost = Q(
        status=EnergyExport.Status.PENDING, created_at__lt=now - EXPORT_UNSENT
    ) | EXPORT_LEASE.lost_q(now)
    ids = list(
        EnergyExport.objects.filter(lost)
        .order_by("created_at", "id")
        .values_list("id", flat=True)[:EXPORTS_RESENT_PER_RUN]
    )
    for export_id in ids:
        app.send_task(BUILD_EXPORT_TASK, args=[export_id])
    return len(ids)


# Days a built export is kept: its file can be built again from the rollups at any time.
# VIGIL_ENERGY_EXPORT_RETENTION_DAYS.
EXPORT_RETENTION_DAYS = 30
PRUNE_CHUNK = 200  # exports deleted per statement (each holds its file)


def exports_prune(now: datetime | None = None) -> int:
    """Delete the exports asked for longer ago than the retention, whatever their state, a
    chunk at a time; how many were deleted."""
    days = retention_days("VIGIL_ENERGY_EXPORT_RETENTION_DAYS", EXPORT_RETENTION_DAYS)
    old = EnergyExport.objects.filter(created_at__lt=(now or timezone.now()) - timedelta(days=days))
    deleted = 0
    while ids := list(old.values_list("pk", flat=True)[:PRUNE_CHUNK]):
        deleted += EnergyExport.objects.filter(pk__in=ids).delete()[0]
    return deleted


def export_download_url(export: EnergyExport) -> str:
    return f"{settings.VIGIL_BASE_URL}{reverse('energy_api:export_download', args=[export.pk])}"


def export_build(export_id: int, worker: str = "worker") -> EnergyExport | None:
    """Build a pending export: claimed with a lease (two workers given the same id build it
    once), the file (the daily CSV, or the report printed by Chromium) stored
    gzip-compressed, and a CSV's link emailed to the requester when they have an address.
    None: not pending (done, or another worker's build in progress)."""
    from webapp.energy.report import ReportError

    if not workrows.claim(EXPORT_LEASE, export_id, worker, EXPORT_STALE.total_seconds()):
        return None
    export = EnergyExport.objects.select_related("cluster", "requested_by").get(pk=export_id)
    # Read before the data: a change while building leaves an older version on the row, and
    # the next request builds again (never the other way round).
    export.data_version = data_version(export.cluster, export_months(export.month, export.kind))
    try:
        data, rows = _export_file(export)
    except (NoEnergyData, ReportError) as exc:
        export.status, export.error = EnergyExport.Status.FAILED, str(exc)[:1024]
        export.finished_at = timezone.now()
        workrows.finish(
            EXPORT_LEASE,
            export.pk,
            export.status,
            error=export.error,
            finished_at=export.finished_at,
            data_version=export.data_version,
        )
        return export
    export.file_gz, export.file_bytes, export.rows = gzip.compress(data), len(data), rows
    export.status, export.finished_at = EnergyExport.Status.DONE, timezone.now()
    workrows.finish(
        EXPORT_LEASE,
        export.pk,
        export.status,
        file_gz=export.file_gz,
        file_bytes=export.file_bytes,
        rows=rows,
        finished_at=export.finished_at,
        data_version=export.data_version,
    )
    user = export.requested_by
    # The PDF is served to the page that polls for it; the CSV's link is also emailed.
    if export.kind == EnergyExport.Kind.DAILY_CSV and user is not None and user.email:
        _export_email(export, user.email)
    return export


def _export_file(export: EnergyExport) -> tuple[bytes, int]:
    """The export's file and its rows (0 for the PDF); NoEnergyData, ReportError."""
    from webapp.energy.daily import DAILY_COLUMNS, energy_daily_rows
    from webapp.energy.report import report_pdf

    if export.kind == EnergyExport.Kind.REPORT_PDF:
        return report_pdf(export.cluster, export.month), 0
    rows = energy_daily_rows(export.cluster, *month_bounds(export.month))
    # The core CSV writer (its formula-injection guard included), kept as bytes.
    data = csv_response(
        export.filename, DAILY_COLUMNS, ([row[c] for c in DAILY_COLUMNS] for row in rows)
    ).content
    return data, len(rows)


def _export_email(export: EnergyExport, to: str) -> None:
    context = {"export": export, "url": export_download_url(export), "cluster": export.cluster}
    outcome = mail.send("energy-export", to, context)
    if not outcome.sent:
        # The file is built and on the page; only the email failed: say so on the row.
        export.error = f"email to {to} failed: {outcome.error}"[:1024]
        export.save(update_fields=["error"])
        return
    export.emailed_to = to
    export.save(update_fields=["emailed_to"])


def export_file(export: EnergyExport) -> bytes:
    """The built file, uncompressed (b"" before it is built)."""
    return gzip.decompress(bytes(export.file_gz)) if export.file_gz else b""
