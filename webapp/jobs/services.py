"""Writes of the jobs app: job events from schedulers, job type rules.

`job_events_ingest(raw)` is the one path for scheduler events (the Celery task
`vigil.jobs.ingest_events` and `POST /api/v1/job-events` both call it). Per batch, in one
transaction:
  1. validate (`parse_job_events`) and authenticate the sending node, which must have the
     scheduler role (`Node.may_send_job_events`): a batch places jobs on any node of the
     cluster, so a GPU node's token alone may not send one;
  2. lock the batch's jobs (created first if new) in id order, so two workers applying events of
     the same job serialize instead of racing;
  3. apply each event. A re-sent event (same job, kind, ts: the JobEvent unique key) changes
     nothing. Events may arrive out of order, so every state change is guarded by the time of
     the event that set the current state (`Job.state_at`), and allocation intervals are cut
     by the job's closing events (requeued, ended) whenever they arrived;
  4. set the scheduler's node states the batch carries (`fleet.services.node_states_apply`).
A batch that fails validation, authentication or a cross-event check is refused whole
(BatchError / AuthError) and nothing of it is stored; the caller records it with
`batch_reject`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from collectors.schema import BatchError, JobEventBatch, JobEventIn, parse_job_events
from webapp.core.refusals import AuthError
from webapp.core.units import epoch_to_utc
from webapp.fleet.models import Gpu, Node
from webapp.fleet.services import AuthenticatedNode, node_authenticate, node_states_apply
from webapp.jobs.choices import SCHEDULER_STATES, JobEventKind, JobSource, JobState
from webapp.jobs.models import Job, JobAllocation, JobTally, JobTypeRule
from webapp.jobs.tallies import (
    TALLY_COLUMNS,
    TALLY_WORK_MEM,
    Tally,
    tally_fetch,
    tally_sql,
    tally_store,
)
from webapp.jobs.typing_rules import (
    DEFAULT_RULES,
    CompiledRule,
    compile_rules,
    job_type_classify,
)

log = logging.getLogger("vigil.jobs")

# Which event wins when two carry the same timestamp: a job requeued and restarted in the
# same second is running; one started and ended in the same second has ended.
_EVENT_RANK = {
    JobEventKind.SUBMITTED: 0,
    JobEventKind.REQUEUED: 1,
    JobEventKind.STARTED: 2,
    JobEventKind.ENDED: 3,
}
_CLOSING = (JobEventKind.REQUEUED, JobEventKind.ENDED)
_METADATA = ("name", "user", "team", "project", "partition", "qos", "comment")


# A job's GPU time in its runs before its current one: its closed allocations that started
# before its start (all of them while it waits after a requeue). Jobs migration 0007 fills jobs
# stored before the column the same way.
_EARLIER_RUNS_SQL = """
SELECT a.job_id, sum(date_part('epoch', a."end" - a.start))
FROM jobs_joballocation a
JOIN unnest(%s::bigint[], %s::timestamptz[]) AS j(id, start_at) ON j.id = a.job_id
WHERE a."end" IS NOT NULL AND (j.start_at IS NULL OR a.start < j.start_at)
GROUP BY a.job_id
"""


def _state_rank(state: str) -> int:
    if state == JobState.PENDING:
        return _EVENT_RANK[JobEventKind.REQUEUED]
    if state == JobState.RUNNING:
        return _EVENT_RANK[JobEventKind.STARTED]
    return _EVENT_RANK[JobEventKind.ENDED]


# --- Job type rules ----------------------------------------------------------------------

# Rules are read on every batch, so they are cached per process; an admin edit reaches every
# worker within the TTL (and this process at once: the admin calls type_rules_forget()).
TYPE_RULES_TTL_S = 30.0
_rules_lock = threading.Lock()
_rules_cache: tuple[float, list[CompiledRule]] | None = None


def type_rules() -> list[CompiledRule]:
    """The enabled JobTypeRule rows in order, compiled; a rule with a broken regex is skipped."""
    global _rules_cache
    cached = _rules_cache
    if cached is not None and time.monotonic() - cached[0] < TYPE_RULES_TTL_S:
        return cached[1]
    compiled: list[CompiledRule] = []
    for rule in JobTypeRule.objects.filter(enabled=True).order_by("order", "id"):
        try:
            compiled.extend(compile_rules([(rule.field, rule.pattern, rule.job_type)]))
        except ValueError as exc:
            log.warning("job type rule %s skipped: %s", rule.pk, exc)
    with _rules_lock:
        _rules_cache = (time.monotonic(), compiled)
    return compiled


def type_rules_restore_defaults() -> int:
    """Replace every job type rule with the default set (typing_rules.DEFAULT_RULES)."""
    with transaction.atomic():
        JobTypeRule.objects.all().delete()
        JobTypeRule.objects.bulk_create(
            JobTypeRule(order=(i + 1) * 10, field=field, pattern=pattern, job_type=job_type)
            for i, (field, pattern, job_type) in enumerate(DEFAULT_RULES)
        )
    type_rules_forget()
    return len(DEFAULT_RULES)


def type_rules_forget() -> None:
    global _rules_cache
    with _rules_lock:
        _rules_cache = None


# --- Job events --------------------------------------------------------------------------


@dataclass(frozen=True)
class JobEventsResult:
    batch_id: str
    events: int  # events in the batch
    applied: int  # events not seen before
    jobs: int  # distinct jobs the batch names
    node_states: int = 0  # scheduler node states in the batch
    node_states_unknown: int = 0  # of those, names the fleet does not know (ignored)

    @property
    def duplicates(self) -> int:
        return self.events - self.applied


def job_events_ingest(raw: str | bytes) -> JobEventsResult:
    """Validate, authenticate and apply one job-event batch. Raises BatchError or AuthError
    to refuse it whole (nothing stored)."""
    batch = parse_job_events(raw, max_future_s=settings.VIGIL_MAX_FUTURE_SKEW_S)
    sender = node_authenticate(batch.cluster, batch.node, batch.credential)
    _scheduler_check(batch, sender)
    with transaction.atomic():
        applier = _Applier(batch, sender)
        applied = applier.run()
        unknown = node_states_apply(sender.cluster_id, batch.node_states)
    return JobEventsResult(
        str(batch.batch_id),
        len(batch.events),
        applied,
        len(applier.jobs),
        node_states=len(batch.node_states),
        node_states_unknown=unknown,
    )


def _scheduler_check(batch: JobEventBatch, sender: AuthenticatedNode) -> None:
    """Refuse a sender without the scheduler role (read with its key: a change in the admin
    takes effect within VIGIL_AUTH_CACHE_S everywhere, as a rotated token does)."""
    if not sender.may_send_job_events:
        raise AuthError(
            "not_scheduler",
            f"node {batch.cluster}/{batch.node} may not send job events: give it the "
            "scheduler role (manage.py issue_node_token --scheduler, or the admin)",
        )


class _Applier:
    """Applies one batch's events inside the caller's transaction."""

    def __init__(self, batch: JobEventBatch, sender: AuthenticatedNode) -> None:
        self.batch = batch
        self.cluster_id = sender.cluster_id
        self.source = batch.source if batch.source in JobSource.values else JobSource.HTTP
        self.jobs: dict[str, Job] = {}
        self.nodes: dict[str, int] = {}
        # (node id, the scheduler's GPU index) -> (GPU id, NVML index)
        self.gpus: dict[tuple[int, int], tuple[int, int]] = {}
        # Jobs whose runs before their current one this batch may have changed (a start, a
        # requeue, an end, a late event of an earlier run): earlier_runs_gpu_time_s is summed
        # again for them.
        self.rerun: set[Job] = set()

    def run(self) -> int:
        events = self.batch.events
        if not events:
            return 0
        self._resolve_nodes()
        self._lock_jobs()
        rules = type_rules()
        applied = 0
        for i, event in enumerate(events):
            job = self.jobs[event.job_id]
            if self._apply(i, event, job, rules):
                applied += 1
        self._earlier_runs_sum()
        for job_id, job in self.jobs.items():
            self._check(job_id, job)
            job.save()
        return applied

    def _earlier_runs_sum(self) -> None:
        """The GPU time of each job's closed allocations that started before its current run
        (one query for the batch, none for a batch of submissions alone)."""
        if not self.rerun:
            return
        jobs = list(self.rerun)
        with connection.cursor() as cur:
            cur.execute(
                _EARLIER_RUNS_SQL, [[job.pk for job in jobs], [job.start_at for job in jobs]]
            )
            sums = dict(cur.fetchall())
        for job in jobs:
            job.earlier_runs_gpu_time_s = float(sums.get(job.pk) or 0.0)

    def _resolve_nodes(self) -> None:
        """Map every hostname of every allocation to a fleet node (and its GPUs by index)."""
        hostnames = {g.node for e in self.batch.events for g in e.allocation}
        if not hostnames:
            return
        self.nodes = dict(
            Node.objects.filter(cluster_id=self.cluster_id, hostname__in=hostnames).values_list(
                "hostname", "id"
            )
        )
        for i, event in enumerate(self.batch.events):
            for j, gpus in enumerate(event.allocation):
                if gpus.node not in self.nodes:
                    raise BatchError(
                        "unknown_node",
                        f"events.{i}.allocation.{j}.node: no node {gpus.node!r} in cluster "
                        f"{self.batch.cluster!r}",
                    )
        # The scheduler's GPU index is a position in the node's gres.conf (the device file
        # /dev/nvidiaN), not NVML's index: matched by device minor number on a node whose
        # agent reports minors, by NVML index (position) on one that does not. A GPU may have
        # moved slots over time: the most recently registered one holds the slot now (ordered
        # by id, the last one wins).
        rows = list(
            Gpu.objects.filter(node_id__in=self.nodes.values())
            .order_by("id")
            .values_list("id", "node_id", "index", "minor_number")
        )
        with_minors = {node_id for _, node_id, _, minor in rows if minor is not None}
        for gpu_id, node_id, index, minor in rows:
            slot = minor if node_id in with_minors else index
            if slot is not None:
                self.gpus[(node_id, slot)] = (gpu_id, index)

    def _lock_jobs(self) -> None:
        ids = sorted({e.job_id for e in self.batch.events})
        Job.objects.bulk_create(
            [Job(cluster_id=self.cluster_id, scheduler_id=i, source=self.source) for i in ids],
            ignore_conflicts=True,
        )
        self.jobs = {
            job.scheduler_id: job
            for job in Job.objects.select_for_update()
            .filter(cluster_id=self.cluster_id, scheduler_id__in=ids)
            .order_by("id")
        }

    def _apply(self, i: int, event: JobEventIn, job: Job, rules: list[CompiledRule]) -> bool:
        ts = epoch_to_utc(event.ts)
        new = self._event_record(job, event, ts)
        if event.kind == JobEventKind.STARTED:
            # Even a re-sent start may name GPUs not recorded yet (one watcher per node
            # reporting the same start): those are added, the rest already exist.
            self._allocations_open(job, event, ts)
        if not new:
            return False
        self._metadata_merge(job, event, rules)
        current = (job.state_at, _state_rank(job.state)) if job.state_at else None
        is_latest = current is None or (ts, _EVENT_RANK[event.kind]) >= current
        if event.kind != JobEventKind.SUBMITTED:
            self.rerun.add(job)
        if event.kind == JobEventKind.SUBMITTED:
            if job.submit_at is None:
                job.submit_at = epoch_to_utc(event.submit_ts) or ts
            if current is None:
                job.state, job.state_at = JobState.PENDING, ts
        elif event.kind == JobEventKind.STARTED:
            if is_latest:
                job.state, job.state_at = JobState.RUNNING, ts
                job.start_at = epoch_to_utc(event.start_ts) or ts
                job.end_at = None
                job.exit_code = None
            elif job.start_at is None:
                job.start_at = epoch_to_utc(event.start_ts) or ts
        elif event.kind == JobEventKind.REQUEUED:
            self._allocations_close(job, ts)
            if is_latest:
                job.state, job.state_at = JobState.PENDING, ts
                # Back in the queue: its next run has not started (Slurm moves the submit
                # time to the requeue, after the last run's start).
                job.start_at = job.end_at = None
        elif event.kind == JobEventKind.ENDED:
            end = epoch_to_utc(event.end_ts) or ts
            self._allocations_close(job, end)
            if is_latest:
                job.state, job.state_at = SCHEDULER_STATES[event.state], ts
                job.end_at = end
                job.exit_code = event.exit_code
                if job.start_at is None and event.start_ts is not None:
                    job.start_at = epoch_to_utc(event.start_ts)
        return True

    def _event_record(self, job: Job, event: JobEventIn, ts: datetime) -> bool:
        """Store the event; False if it was stored before (a re-sent event)."""
        detail = {"source": self.batch.source, "sender": self.batch.node}
        if event.allocation:
            detail["allocation"] = {g.node: g.gpu_indices for g in event.allocation}
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO jobs_jobevent (job_id, kind, ts, state, exit_code, detail) "
                "VALUES (%s, %s, %s, %s, %s, %s::jsonb) "
                "ON CONFLICT (job_id, kind, ts) DO NOTHING RETURNING id",
                [
                    job.pk,
                    event.kind,
                    ts,
                    SCHEDULER_STATES[event.state] if event.state else "",
                    event.exit_code,
                    json.dumps(detail),
                ],
            )
            return cur.fetchone() is not None

    def _metadata_merge(self, job: Job, event: JobEventIn, rules: list[CompiledRule]) -> None:
        for field in _METADATA:
            value = getattr(event, field)
            if value:
                setattr(job, field, value)
        if event.submit_ts is not None:
            job.submit_at = epoch_to_utc(event.submit_ts)
        if event.gpus_requested is not None:
            job.gpus_requested = event.gpus_requested
        elif event.allocation and not job.gpus_requested:
            job.gpus_requested = sum(len(g.gpu_indices) for g in event.allocation)
        if event.nodes_requested is not None:
            job.nodes_requested = event.nodes_requested
        elif event.allocation and not job.nodes_requested:
            job.nodes_requested = len({g.node for g in event.allocation})
        if event.last_checkpoint_ts is not None:
            at = epoch_to_utc(event.last_checkpoint_ts)
            if job.last_checkpoint_at is None or at > job.last_checkpoint_at:
                job.last_checkpoint_at = at
        if event.job_type is not None:
            job.job_type, job.job_type_explicit = event.job_type, True
        elif not job.job_type_explicit:
            job.job_type = job_type_classify(
                rules, name=job.name, partition=job.partition, qos=job.qos, comment=job.comment
            )

    def _allocations_open(self, job: Job, event: JobEventIn, ts: datetime) -> None:
        """One interval per (node, GPU) of the allocation, from the start until the job's next
        closing event if one is already known (an `ended` that arrived first), else open."""
        if not event.allocation:
            return
        start = epoch_to_utc(event.start_ts) or ts
        # The run ends at the first later requeue, end or restart already on record.
        end = (
            job.events.filter(
                Q(kind__in=_CLOSING, ts__gte=start) | Q(kind=JobEventKind.STARTED, ts__gt=ts)
            )
            .order_by("ts")
            .values_list("ts", flat=True)
            .first()
        )
        if end is not None and job.end_at is not None and start <= job.end_at < end:
            end = job.end_at  # an ended event's end_ts may precede the event's own ts
        # A new run while an older one is still open: the older one ended when this started.
        self._allocations_close(job, start, before=start)
        existing = set(job.allocations.filter(start=start).values_list("node_id", "gpu_index"))
        rows = []
        for gpus in event.allocation:
            node_id = self.nodes[gpus.node]
            for slot in gpus.gpu_indices:
                # Stored by NVML index, as the GPU's samples are (the slot itself for a GPU
                # not registered yet).
                gpu_id, index = self.gpus.get((node_id, slot), (None, slot))
                if (node_id, index) in existing:
                    continue
                existing.add((node_id, index))
                rows.append(
                    JobAllocation(
                        job=job,
                        node_id=node_id,
                        gpu_id=gpu_id,
                        gpu_index=index,
                        start=start,
                        end=end,
                    )
                )
        JobAllocation.objects.bulk_create(rows)

    def _allocations_close(self, job: Job, at: datetime, *, before: datetime | None = None) -> None:
        """End every allocation of the job that spans `at` (started by then, not ended by
        then); with `before`, only those that started strictly before it."""
        spanning = job.allocations.filter(Q(end__isnull=True) | Q(end__gt=at))
        spanning = spanning.filter(start__lt=before) if before else spanning.filter(start__lte=at)
        spanning.update(end=at)

    def _check(self, job_id: str, job: Job) -> None:
        """Cross-event consistency, after the whole batch: refuse what cannot be true."""
        if job.start_at and job.submit_at and job.start_at < job.submit_at:
            raise BatchError(
                "start_before_submit",
                f"job {job_id}: starts ({job.start_at:%Y-%m-%d %H:%M:%S}Z) before it was "
                f"submitted ({job.submit_at:%Y-%m-%d %H:%M:%S}Z)",
            )
        if job.end_at and job.start_at and job.end_at < job.start_at:
            raise BatchError(
                "end_before_start",
                f"job {job_id}: ends ({job.end_at:%Y-%m-%d %H:%M:%S}Z) before it starts "
                f"({job.start_at:%Y-%m-%d %H:%M:%S}Z) (end before start)",
            )


# --- Job tallies -------------------------------------------------------------------------
#
# The characterization's per-cluster summary (webapp/jobs/tallies.py). Triggers on jobs_job add
# a delta row per changed job; the trace import adds one per transaction. Readers sum the rows;
# compaction merges them into one row per type and GPU / CPU.


def job_tallies_add(cluster_id: int, tally: Tally, *, compacted: bool = False) -> int:
    """Store `tally` (of jobs just written without the trigger) as rows of the cluster."""
    connection.ensure_connection()
    return tally_store(connection.connection, cluster_id, tally, compacted)


def job_tallies_compact(cluster_id: int) -> int:
    """Merge the cluster's tally rows into one per type and GPU / CPU; the rows merged.

    Safe beside writers: rows they add meanwhile are not deleted (not yet visible), and a
    concurrent compaction deletes (and merges) only the rows it got first."""
    with transaction.atomic():
        connection.ensure_connection()
        rows = connection.connection.execute(
            "SELECT count(*) FROM jobs_jobtally WHERE cluster_id = %s", [cluster_id]
        ).fetchone()[0]
        tally = tally_fetch(
            connection.connection,
            f"DELETE FROM jobs_jobtally WHERE cluster_id = %s RETURNING {TALLY_COLUMNS}",
            [cluster_id],
        )
        job_tallies_add(cluster_id, tally, compacted=True)
    return rows


# Delta rows a cluster may gather before the warm-up task merges them: the page sums them in
# Python, so this bounds what a view pays for them.
TALLY_DELTAS_MAX = 10_000


def job_tallies_compact_if_due(cluster_id: int) -> int:
    """job_tallies_compact when the cluster has more than TALLY_DELTAS_MAX delta rows."""
    deltas = JobTally.objects.filter(cluster_id=cluster_id, compacted=False)[
        : TALLY_DELTAS_MAX + 1
    ].count()
    return job_tallies_compact(cluster_id) if deltas > TALLY_DELTAS_MAX else 0


def job_tallies_rebuild(cluster_id: int) -> None:
    """Count the cluster's tallies again from its jobs (a repair: after writes that bypassed
    the triggers). Writers of jobs wait meanwhile: the table lock keeps their deltas out until
    the new counts, which include their changes or not, are in."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL work_mem = '{TALLY_WORK_MEM}'")
        cur.execute("LOCK TABLE jobs_jobtally IN SHARE ROW EXCLUSIVE MODE")
        cur.execute("DELETE FROM jobs_jobtally WHERE cluster_id = %s", [cluster_id])
        cur.execute(
            f"INSERT INTO jobs_jobtally (cluster_id, {TALLY_COLUMNS}, compacted) "
            f"SELECT *, true FROM ({tally_sql('cluster_id = %s')}) t",
            [cluster_id],
        )
