"""Writes of the energy app: the hourly GPU and node energy rollups.

Each GPU-hour is recomputed whole from raw samples (webapp/energy/sources.py) and split at
allocation boundaries, so a row is the energy one GPU used in one hour while one job held it
(job null: no job held it, "idle"). Rows are replaced per (GPU, hour), so a refresh is exact
whatever was redelivered, and running it twice changes nothing.

Which GPU-hours to recompute: ended hours whose sample count (telemetry's
gpus_hourly_sample_counts, from its 1-minute rollup) differs from the count this rollup saw,
within VIGIL_ENERGY_LOOKBACK_H; and the hour after each (its first interval starts with the
previous hour's last sample). No hook in ingest is needed; the
comparison reads the 1-minute rollup of the lookback window each run, which a very large
fleet would rather avoid: a dirty-range row written by ingest, as RollupDirty is, would let
this refresh recompute exactly the GPU-hours that changed.
"""

from __future__ import annotations

import gzip
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from webapp.alerts.services import channel_disable
from webapp.celery import app
from webapp.core import mail, workrows
from webapp.core.exports import csv_response
from webapp.energy import accounting
from webapp.energy.carbon import node_power_estimate_w
from webapp.energy.models import (
    EnergyExport,
    EnergyReportDelivery,
    EnergyReportSubscription,
    default_timezone,
)
from webapp.energy.selectors import (
    INPUTS_VERSION_KEY,
    REPORT_CACHE_OPEN_S,
    NoEnergyData,
    data_version,
    month_bounds,
    month_key,
    months_ending,
)
from webapp.energy.sources import gpu_series, node_series
from webapp.failures.services import retention_days
from webapp.fleet.models import Cluster, Node
from webapp.telemetry.selectors import gpus_hourly_sample_counts, gpus_hours_with_samples

HOUR = timedelta(hours=1)
# GPUs read and written per statement group: a few hundred keeps each read of raw samples
# to tens of thousands of rows and each transaction short.
GPUS_PER_CHUNK = 500
# GPU-hours looked at per refresh run (the rest wait for the next run, oldest first).
STALE_PER_RUN = 20_000

_GPU_COLUMNS = (
    "cluster_id",
    "node_id",
    "gpu_id",
    "hour",
    "job_id",
    "counter_j",
    "integrated_j",
    "model_j",
    "covered_s",
    "idle_j",
    "idle_s",
    "samples",
    "hour_samples",
    "computed_at",
)
_NODE_COLUMNS = (
    "cluster_id",
    "node_id",
    "hour",
    "ipmi_j",
    "ipmi_s",
    "model_j",
    "gpu_j",
    "computed_at",
)

# The cluster's job-hour sums of one hour, rewritten from its GPU-hour rows.
_JOB_HOUR_SQL = """
WITH gone AS (
    DELETE FROM energy_jobenergyhour WHERE cluster_id = %(cluster)s AND hour = %(hour)s
)
INSERT INTO energy_jobenergyhour
    (cluster_id, hour, job_id, gpus, counter_j, integrated_j, model_j, covered_s, idle_j, idle_s)
SELECT cluster_id, hour, job_id, count(DISTINCT gpu_id), sum(counter_j), sum(integrated_j),
    sum(model_j), sum(covered_s), sum(idle_j), sum(idle_s)
FROM energy_gpuenergyhour WHERE cluster_id = %(cluster)s AND hour = %(hour)s
GROUP BY cluster_id, hour, job_id
"""

# The month's version moves with the rows (same transaction): a report or export computed from
# the month is current while its version is (selectors.data_version).
_MONTH_VERSION_SQL = """
INSERT INTO energy_energymonthversion (cluster_id, month, version, changed_at)
VALUES (%(cluster)s, %(month)s, 1, now())
ON CONFLICT (cluster_id, month) DO UPDATE
SET version = energy_energymonthversion.version + 1, changed_at = excluded.changed_at
"""

_ALLOC_SQL = """
SELECT coalesce(a.gpu_id, g.id), a.job_id, extract(epoch FROM a.start)::float8,
    extract(epoch FROM a."end")::float8
FROM jobs_joballocation a
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
WHERE a.start < %(hi)s AND (a."end" IS NULL OR a."end" > %(lo)s)
    AND coalesce(a.gpu_id, g.id) = ANY(%(ids)s)
ORDER BY a.start
"""

# What the rollup saw of each GPU-hour it accounted (telemetry's count when it read them).
_SEEN_SQL = """
SELECT gpu_id, hour, max(hour_samples) FROM energy_gpuenergyhour
WHERE hour >= %(since)s AND hour < %(until)s GROUP BY 1, 2
"""


def _stale_gpu_hours(since: datetime, until: datetime, limit: int) -> list[tuple[int, datetime]]:
    """The GPU-hours in [since, until) whose sample count (telemetry's) differs from the one
    they were accounted with, oldest first, at most `limit`; and the hour after each that
    has samples (its first interval starts with the previous hour's last sample)."""
    counts = gpus_hourly_sample_counts(since, until)
    with connection.cursor() as cur:
        cur.execute(_SEEN_SQL, {"since": since, "until": until})
        accounted = {(gpu_id, hour): n for gpu_id, hour, n in cur.fetchall()}
    changed = sorted(
        (key for key, n in counts.items() if accounted.get(key) != n),
        key=lambda key: (key[1], key[0]),
    )[:limit]
    stale = set(changed)
    stale.update((g, h + HOUR) for g, h in changed if (g, h + HOUR) in counts)
    return sorted(stale, key=lambda key: (key[1], key[0]))


@dataclass(frozen=True)
class RefreshResult:
    gpu_hours: int
    rows: int


def _epoch(t: datetime) -> float:
    return t.timestamp()


def _gpu_nodes(gpu_ids: list[int]) -> dict[int, tuple[int, int]]:
    """gpu id -> (node id, cluster id)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT g.id, n.id, n.cluster_id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
            " WHERE g.id = ANY(%s)",
            [gpu_ids],
        )
        return {g: (n, c) for g, n, c in cur.fetchall()}


def _allocations(ids: list[int], lo: datetime, hi: datetime) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = defaultdict(list)
    with connection.cursor() as cur:
        cur.execute(_ALLOC_SQL, {"ids": ids, "lo": lo, "hi": hi})
        for gpu_id, job_id, start, end in cur.fetchall():
            out[gpu_id].append((job_id, start, np.inf if end is None else end))
    return out


def _job_of(t1: np.ndarray, allocs: list[tuple]) -> np.ndarray:
    """The job holding the GPU at each interval end (0: none); a later allocation wins."""
    job = np.zeros(len(t1), dtype=np.int64)
    for job_id, start, end in allocs:
        job[(t1 >= start) & (t1 < end)] = job_id
    return job


def _gpu_hour_rows(gpu_id: int, where: tuple[int, int], hour: datetime, series, allocs, now):
    """Rollup rows of one GPU-hour, one per job that held it (and one for no job)."""
    node_id, cluster_id = where
    lo = _epoch(hour)
    iv = accounting.gpu_intervals(
        series.ts,
        series.energy_mj,
        series.power_w,
        power_limit_w=series.power_limit_w,
        util_pct=series.gpu_util,
    )
    hour_samples = int(np.count_nonzero(series.ts >= lo))
    in_hour = iv.t1 >= lo
    jobs = _job_of(iv.t1, allocs)
    keys, seg = np.unique(jobs, return_inverse=True)
    seg = np.where(in_hour, seg, -1)
    # Idle: utilization under the busy bound (the rule of the wasted-GPUs page); unknown
    # utilization is not called idle.
    util = series.gpu_util[np.searchsorted(series.ts, iv.t1)]
    busy = ~(util < settings.VIGIL_BUSY_UTIL_PCT)
    sums = accounting.segment_sums(iv, seg, len(keys), busy=busy)
    rows = []
    for k, job_id in enumerate(keys):
        if sums.samples[k] == 0:
            continue
        c, i, m = sums.energy_j[k]
        rows.append(
            (
                cluster_id,
                node_id,
                gpu_id,
                hour,
                int(job_id) or None,
                float(c),
                float(i),
                float(m),
                float(sums.covered_s[k]),
                float(sums.idle_j[k]),
                float(sums.idle_s[k]),
                int(sums.samples[k]),
                hour_samples,
                now,
            )
        )
    if not rows and hour_samples:
        # Only the sample opening the hour: remember it was seen, with no energy yet.
        rows.append(
            (cluster_id, node_id, gpu_id, hour, None, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 1, now)
        )
    return rows


def _node_hour_row(node: Node, hour: datetime, series, gpu_j: float, gpu_s: float, now):
    """Node IT energy of one hour: IPMI server power where measured, else the node power
    model over the seconds its GPUs were accounted."""
    lo = _epoch(hour)
    ipmi_j = ipmi_s = 0.0
    cpu_util = None
    if series is not None:
        iv = accounting.gpu_intervals(series.ts, None, series.server_power_w)
        sel = (iv.t1 >= lo) & (iv.method == accounting.INTEGRATED)
        ipmi_j = float(iv.energy_j[sel].sum())
        ipmi_s = float((iv.t1 - iv.t0)[sel].sum())
        cu = series.cpu_util[series.ts >= lo]
        cpu_util = float(np.nanmean(cu)) if np.isfinite(cu).any() else None
    model_j = 0.0
    rest_s = gpu_s - ipmi_s
    if rest_s > 0 and gpu_s > 0:
        gpu_w = gpu_j / gpu_s
        model_j = node_power_estimate_w(node, gpu_w, cpu_util) * rest_s
    return (node.cluster_id, node.id, hour, ipmi_j, ipmi_s, model_j, gpu_j, now)


def _copy_rows(cur, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    if not rows:
        return
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def gpu_hours_recompute(hour: datetime, gpu_ids: list[int]) -> int:
    """Recompute the energy rows of these GPUs in this hour, and their nodes' rows; returns
    the GPU rows written. One transaction per call: a reader sees old rows or new, never a
    half."""
    hour = hour.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hi = hour + HOUR
    now = timezone.now()
    where = _gpu_nodes(gpu_ids)
    ids = [g for g in gpu_ids if g in where]
    series = gpu_series(ids, hour, hi)
    allocs = _allocations(ids, hour, hi)
    rows: list[tuple] = []
    for gpu_id in ids:
        s = series.get(gpu_id)
        if s is not None:
            rows.extend(_gpu_hour_rows(gpu_id, where[gpu_id], hour, s, allocs.get(gpu_id, []), now))
    # Node totals: sum the GPU energy of every GPU of the node this hour (rows of other GPUs
    # of the node not recomputed now are read back from the table).
    node_ids = sorted({where[g][0] for g in ids})
    gpu_j: dict[int, float] = defaultdict(float)
    gpu_s: dict[int, float] = defaultdict(float)
    fresh = {r[2] for r in rows}
    for r in rows:
        gpu_j[r[1]] += r[5] + r[6] + r[7]
        gpu_s[r[1]] += r[8]
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "DELETE FROM energy_gpuenergyhour WHERE hour = %s AND gpu_id = ANY(%s)", [hour, ids]
        )
        cur.execute(
            "SELECT node_id, sum(counter_j + integrated_j + model_j), sum(covered_s)"
            " FROM energy_gpuenergyhour WHERE hour = %s AND node_id = ANY(%s)"
            " AND NOT gpu_id = ANY(%s) GROUP BY node_id",
            [hour, node_ids, list(fresh)],
        )
        for node_id, j, s in cur.fetchall():
            gpu_j[node_id] += j
            gpu_s[node_id] += s
        _copy_rows(cur.cursor, "energy_gpuenergyhour", _GPU_COLUMNS, rows)
        # Node-seconds of GPU coverage: the mean over the node's GPUs (a node-hour is 3600 s
        # however many GPUs it has).
        cur.execute(
            "SELECT node_id, count(*) FROM fleet_gpu WHERE node_id = ANY(%s) GROUP BY node_id",
            [node_ids],
        )
        gpus_per_node = dict(cur.fetchall())
        nodes = Node.objects.in_bulk(node_ids)
        nseries = node_series(node_ids, hour, hi)
        node_rows = []
        for node_id in node_ids:
            per_gpu_s = gpu_s[node_id] / gpus_per_node.get(node_id, 1)
            node_rows.append(
                _node_hour_row(
                    nodes[node_id], hour, nseries.get(node_id), gpu_j[node_id], per_gpu_s, now
                )
            )
        cur.execute(
            "DELETE FROM energy_nodeenergyhour WHERE hour = %s AND node_id = ANY(%s)",
            [hour, node_ids],
        )
        _copy_rows(cur.cursor, "energy_nodeenergyhour", _NODE_COLUMNS, node_rows)
        for cluster_id in sorted({where[g][1] for g in ids}):
            cur.execute(_JOB_HOUR_SQL, {"cluster": cluster_id, "hour": hour})
            cur.execute(_MONTH_VERSION_SQL, {"cluster": cluster_id, "month": month_key(hour)})
    return len(rows)


def energy_rollups_refresh(now: datetime | None = None) -> RefreshResult:
    """Recompute the ended GPU-hours whose raw samples changed since they were last
    accounted (within VIGIL_ENERGY_LOOKBACK_H), oldest first, at most STALE_PER_RUN."""
    now = now or timezone.now()
    since = (now - timedelta(hours=settings.VIGIL_ENERGY_LOOKBACK_H)).replace(
        minute=0, second=0, microsecond=0
    )
    # Only hours that have ended: the current one would look stale at every run (its samples
    # keep coming) and cost a full read of it each time; it is accounted once it closes.
    until = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    stale = _stale_gpu_hours(since, until, STALE_PER_RUN)
    by_hour: dict[datetime, list[int]] = defaultdict(list)
    for gpu_id, hour in stale:
        by_hour[hour].append(gpu_id)
    rows = 0
    for hour in sorted(by_hour):
        ids = sorted(by_hour[hour])
        for i in range(0, len(ids), GPUS_PER_CHUNK):
            rows += gpu_hours_recompute(hour, ids[i : i + GPUS_PER_CHUNK])
    return RefreshResult(len(stale), rows)


def energy_rollups_rebuild(cluster_id: int, lo: datetime, hi: datetime) -> RefreshResult:
    """Recompute a cluster's GPU-hours in [lo, hi) from its samples, raw or compacted (a
    backfill, or after allocations were corrected). Only hours that still have samples are
    touched: an hour whose samples retention has dropped keeps the rows it has."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT g.id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
            " WHERE n.cluster_id = %s ORDER BY g.id",
            [cluster_id],
        )
        ids = [r[0] for r in cur.fetchall()]
    # Hours with samples, raw or compacted (telemetry packs old hours, one row per GPU).
    hours = gpus_hours_with_samples(ids, lo, hi)
    rows = 0
    for hour in hours:
        for i in range(0, len(ids), GPUS_PER_CHUNK):
            rows += gpu_hours_recompute(hour, ids[i : i + GPUS_PER_CHUNK])
    return RefreshResult(len(hours) * len(ids), rows)


# --- The monthly report email ------------------------------------------------------------------

# The report email's unsubscribe link (energy/urls.py "energy:unsubscribe"), signed by core.mail.
UNSUBSCRIBE_PATH = "/energy/unsubscribe/{token}/"
UNSUBSCRIBE_PURPOSE = "energy"


def report_unsubscribe_url(sub: EnergyReportSubscription) -> str:
    return mail.unsubscribe_url(UNSUBSCRIBE_PATH, UNSUBSCRIBE_PURPOSE, sub.pk)


def report_unsubscribe(sub: EnergyReportSubscription) -> None:
    EnergyReportSubscription.objects.filter(pk=sub.pk).update(
        active=False, updated_at=timezone.now()
    )
    sub.active = False


def previous_month(now: datetime) -> str:
    """The month before `now`'s month, in `now`'s own timezone ('YYYY-MM')."""
    return f"{now.replace(day=1) - timedelta(days=1):%Y-%m}"


# Reports cover UTC months, each hour accounted once it has ended (every 5 minutes, beat
# `energy-rollups`): a month's report waits this long after the month's end, so a recipient
# east of UTC, whose 1st begins before the UTC month ends, gets the whole month.
REPORT_SETTLE = timedelta(hours=1)


def subscription_zone(sub: EnergyReportSubscription) -> ZoneInfo:
    """The recipient's timezone; a name that no longer resolves (the tz database changed)
    falls back to the default, so the report still goes out."""
    try:
        return ZoneInfo(sub.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo(default_timezone())


def report_month_due(sub: EnergyReportSubscription, now: datetime) -> str | None:
    """The month whose report is due to this recipient at `now`: the previous month, from the
    report day and hour in the recipient's timezone (or later that month: a beat that was
    down catches up), once that UTC month has ended and settled; None when nothing is due."""
    local = now.astimezone(subscription_zone(sub))
    if (local.day, local.hour) < (
        settings.VIGIL_ENERGY_REPORT_DAY,
        settings.VIGIL_ENERGY_REPORT_HOUR,
    ):
        return None
    month = previous_month(local)
    if now < month_bounds(month)[1] + REPORT_SETTLE:
        return None
    return month


# A report delivery is claimed to send it (pending, or failed at an earlier run); one whose
# worker died mid-send is free again once its lease has run out.
DELIVERY_LEASE = workrows.LeaseSpec(
    EnergyReportDelivery,
    claimable=(EnergyReportDelivery.Status.PENDING, EnergyReportDelivery.Status.FAILED),
    running=EnergyReportDelivery.Status.SENDING,
)
# How long one report email may take (render, SMTP) before another worker may send it.
DELIVERY_LEASE_S = 600.0


def report_send(
    sub: EnergyReportSubscription,
    cluster: Cluster,
    month: str,
    pdf: bytes,
    context: dict,
    worker: str = "worker",
) -> EnergyReportDelivery | None:
    """Send one report email with its PDF, at most once. The delivery row is written (and
    committed) before sending and claimed with a lease while the email goes out: a second
    worker skips it (None), a crash mid-send leaves a 'sending' row that a run after its
    lease sends again."""
    to = sub.channel.target
    delivery, _ = EnergyReportDelivery.objects.get_or_create(
        subscription=sub, cluster=cluster, month=month, defaults={"to": to}
    )
    if not workrows.claim(DELIVERY_LEASE, delivery.pk, worker, DELIVERY_LEASE_S):
        delivery.refresh_from_db()
        if delivery.status == EnergyReportDelivery.Status.SENT:
            return delivery
        return None  # another worker is sending it now
    delivery.refresh_from_db()
    _deliver(delivery, sub, cluster, month, pdf, context)
    return delivery


def _deliver(delivery, sub, cluster, month, pdf, context) -> None:
    to = sub.channel.target
    query = urlencode({"cluster": cluster.name, "month": month})
    unsubscribe = report_unsubscribe_url(sub)
    outcome = mail.send(
        "energy-report",
        to,
        {
            **context,
            "report_url": f"{settings.VIGIL_BASE_URL}{reverse('energy:report')}?{query}",
            "page_url": f"{settings.VIGIL_BASE_URL}{reverse('energy:cluster')}?{query}",
            "unsubscribe_url": unsubscribe,
        },
        headers={"List-Unsubscribe": f"<{unsubscribe}>"},
        attachments=[
            mail.Attachment(f"vigil-energy-{cluster.name}-{month}.pdf", pdf, "application/pdf")
        ],
    )
    if outcome.sent:
        delivery.status, delivery.error = EnergyReportDelivery.Status.SENT, ""
        delivery.sent_at = timezone.now()
    else:  # claimable again at the next run
        delivery.status, delivery.error = EnergyReportDelivery.Status.FAILED, outcome.error[:1024]
    if outcome.recipient_refused:
        # As for alerts, the channel is disabled (an admin sees why) rather than refused
        # again every hour.
        channel_disable(sub.channel_id, outcome.error)
    delivery.to, delivery.pdf_bytes, delivery.lease_until = to, len(pdf), None
    workrows.finish(
        DELIVERY_LEASE,
        delivery.pk,
        delivery.status,
        error=delivery.error,
        sent_at=delivery.sent_at,
        to=to,
        pdf_bytes=len(pdf),
    )


def _active_subscriptions() -> list[EnergyReportSubscription]:
    return list(
        EnergyReportSubscription.objects.filter(
            active=True, channel__kind="email", channel__disabled=False
        )
        .select_related("channel")
        .prefetch_related("clusters")
        .order_by("id")
    )


def energy_reports_send(
    month: str | None = None,
    now: datetime | None = None,
    subscriptions: list[EnergyReportSubscription] | None = None,
) -> dict:
    """Email the month's report (default: last month, UTC) to these subscriptions (default:
    every active one on an enabled email channel), one email per cluster, each at most once.
    Clusters without data that month are skipped and counted."""
    from webapp.energy import report  # the report renders templates and figures: load late

    now = now or timezone.now()
    month = month or previous_month(now.astimezone(UTC))
    subs = _active_subscriptions() if subscriptions is None else subscriptions
    done = EnergyReportDelivery.Status.SENT
    counts = {"sent": 0, "failed": 0, "no_data": 0, "already": 0}
    built: dict[int, tuple[bytes, dict] | None] = {}
    for sub in subs:
        for cluster in list(sub.clusters.all()) or list(Cluster.objects.order_by("name")):
            if EnergyReportDelivery.objects.filter(
                subscription=sub, cluster=cluster, month=month, status=done
            ).exists():
                counts["already"] += 1
                continue
            if cluster.id not in built:
                try:
                    context = report.report_context(cluster, month)
                except NoEnergyData:
                    built[cluster.id] = None
                else:
                    built[cluster.id] = (report.report_pdf_from(context), context)
            if built[cluster.id] is None:
                counts["no_data"] += 1
                continue
            pdf, context = built[cluster.id]
            d = report_send(sub, cluster, month, pdf, context)
            if d is None:
                counts["already"] += 1
            else:
                counts["sent" if d.status == done else "failed"] += 1
    return {"month": month, **counts}


def energy_reports_due(now: datetime | None = None) -> dict | None:
    """Send each recipient the report that is due in their timezone (report_month_due);
    None when nothing is due. Per month: what energy_reports_send counted."""
    now = now or timezone.now()
    due: dict[str, list[EnergyReportSubscription]] = defaultdict(list)
    for sub in _active_subscriptions():
        month = report_month_due(sub, now)
        if month is not None:
            due[month].append(sub)
    if not due:
        return None
    return {month: energy_reports_send(month, now, subs) for month, subs in sorted(due.items())}


# --- The daily CSV export (reference §8: built in a background task, delivered as a link) -----


def report_inputs_changed() -> None:
    """A report input outside the rollup changed (PUE, market factor, intensity, grid zone,
    power profile): every cached report is stale, now (for a reader in this transaction) and
    once it commits (a reader who computed from the old rows meanwhile stored them under the
    version of now)."""

    def bump() -> None:
        cache.set(INPUTS_VERSION_KEY, time.time_ns(), None)

    bump()
    transaction.on_commit(bump, robust=True)


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
