"""Stragglers: fail-slow GPUs of running jobs, found from the 1-minute telemetry rollup.

A straggler is a performance event for operations, not a failure label (no cause, not counted
in MTBF). Plain data in `stragglers_find`; `stragglers_detect` reads telemetry through
webapp.telemetry.selectors and records what it finds.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings
from django.utils import timezone

from webapp.failures import diagnosis as engine
from webapp.failures.models import DiagnosisSource, FailureEvent, FailureInputs, FailureKind
from webapp.fleet.models import Gpu
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job, JobAllocation
from webapp.telemetry.selectors import gpus_minute_grid

# A GPU that runs at under 0.8x its job's median for settings.VIGIL_STRAGGLER_MINUTES
# (default 10) straight minutes is a straggler: docs/failure-signatures.md section 8 calls a rank a
# straggler when its iteration time stays above 1.1-1.25x the baseline; 1 / 1.25 = 0.8 of the
# peers' activity, power or clock. It is a performance event for operations, not a failure
# label (no cause, not counted in MTBF).
STRAGGLER_RATIO = 0.8
STRAGGLER_METRICS = ("sm_active", "power_w", "sm_clock_mhz")
# A GPU the job holds but leaves idle (a held spare, a rank with nothing to do) is not slow:
# it does no work for the others to wait on. In a minute where its mean utilization is under
# the fleet's busy line (VIGIL_BUSY_UTIL_PCT, default 10%: the overview's busy / idle) it is
# neither a candidate nor one of the peers; the simulator's lockstep jobs flagged held spares.
IDLE_METRIC = "gpu_util"
BUSY_UTIL_PCT_DEFAULT = 10.0  # VIGIL_BUSY_UTIL_PCT's default, for plain-data callers
# Shown with the event: the rule is a ratio held for minutes, not a signature in a log, and
# the same value as a cause told by a name alone (diagnosis.NAME_ONLY_CONFIDENCE).
STRAGGLER_CONFIDENCE = 0.6
# Minutes of the window a GPU may have no value in (no sample: a collector restart, a minute
# the rollup has not folded yet) and still be judged on the rest: a fifth (2 of 10). Without
# it one lost minute hid a straggler for a whole window; it still needs values in most.
STRAGGLER_GAP_SHARE = 0.2


def stragglers_find(
    series: dict[Hashable, dict[Hashable, dict[str, float | None]]],
    minutes: list[Hashable],
    ratio: float = STRAGGLER_RATIO,
    *,
    busy_util_pct: float = BUSY_UTIL_PCT_DEFAULT,
) -> dict[Hashable, dict[str, list[tuple[float, float]]]]:
    """Plain data in, stragglers out: {gpu: {minute: {metric: mean}}} of one job's GPUs over
    `minutes` -> {gpu: {metric: [(value, median of the others), ...] per minute}} for each GPU
    below `ratio` x the others' median in every minute it has a value, for some metric; it may
    lack a value (a gap: (None, None) in its trail) in up to STRAGGLER_GAP_SHARE of the
    minutes. A GPU-minute whose IDLE_METRIC is under `busy_util_pct` takes no part (see
    IDLE_METRIC), and ends the GPU's case; one without IDLE_METRIC does take part."""
    gpus = list(series)
    empty: dict[str, float | None] = {}
    grid = {
        metric: np.array(
            [[series[g].get(t, empty).get(metric) for t in minutes] for g in gpus], dtype=float
        ).reshape(len(gpus), len(minutes))
        for metric in (*STRAGGLER_METRICS, IDLE_METRIC)
    }
    return {gpus[k]: found for k, found in _stragglers_grid(grid, ratio, busy_util_pct).items()}


def _stragglers_grid(
    grid: dict[str, np.ndarray], ratio: float, busy_util_pct: float
) -> dict[int, dict[str, list[tuple[float, float]]]]:
    """The rule over one job's grid ({metric: [GPUs, minutes]}, NaN: no value): {row: {metric:
    trail}}. Vectorized over the job's GPUs, a sort per minute and metric (a Python loop per
    GPU-minute cost most of a pass at fleet scale; building every other GPU's list again was
    quadratic in the job's GPUs)."""
    out: dict[int, dict[str, list[tuple[float, float]]]] = {}
    some = grid[STRAGGLER_METRICS[0]]
    if some.shape[0] < 2 or some.shape[1] < 1:
        return out
    util = grid.get(IDLE_METRIC)
    idle = util < busy_util_pct if util is not None else np.zeros(some.shape, bool)  # NaN: no
    gaps_allowed = int(STRAGGLER_GAP_SHARE * some.shape[1])
    for metric in STRAGGLER_METRICS:
        gap = np.isnan(grid[metric]) & ~idle
        values = np.where(idle, np.nan, grid[metric])
        medians = _medians_without(values)
        with np.errstate(invalid="ignore"):
            below = (values < ratio * medians) & (medians > 0)
        slow = (below | gap).all(axis=1) & (gap.sum(axis=1) <= gaps_allowed) & ~gap.all(axis=1)
        for k in np.flatnonzero(slow):
            trail = [
                (None, None) if g else (float(v), float(m))
                for v, m, g in zip(values[k], medians[k], gap[k], strict=True)
            ]
            out.setdefault(int(k), {})[metric] = trail
    return out


def _medians_without(values: np.ndarray) -> np.ndarray:
    """[GPUs, minutes] -> for each GPU-minute with a value, the median of the other GPUs'
    values that minute (NaN: no value, or no other GPU). Read from the minute's sorted values
    with the GPU's own left out; equal to statistics.median of the rest, since which copy of
    an equal value goes does not change the rest."""
    out = np.full(values.shape, np.nan)
    for j in range(values.shape[1]):
        column = values[:, j]
        have = ~np.isnan(column)
        ordered = np.sort(column[have])
        n = len(ordered) - 1  # the others
        if n < 1:
            continue
        at = np.searchsorted(ordered, column[have])

        def rest(k: int, ordered: np.ndarray = ordered, at: np.ndarray = at) -> np.ndarray:
            return np.where(k < at, ordered[k], ordered[k + 1])  # the rest's k-th value

        out[have, j] = rest(n // 2) if n % 2 else (rest(n // 2 - 1) + rest(n // 2)) / 2
    return out


def stragglers_detect(now: datetime | None = None) -> int:
    """Open a `performance` FailureEvent for each straggling GPU of a running job (once per
    job run and GPU); how many were opened. Reads the 1-minute rollup: one query for every
    GPU of every running job, then a few for what was found."""
    n_minutes = settings.VIGIL_STRAGGLER_MINUTES
    end = (now or timezone.now()).replace(second=0, microsecond=0)
    minutes = [end - timedelta(minutes=k) for k in range(n_minutes, 0, -1)]
    allocations = list(
        JobAllocation.objects.filter(
            end__isnull=True,
            gpu__isnull=False,
            start__lte=minutes[0],
            job__state=JobState.RUNNING,
        )
        .order_by("job_id", "gpu_id")
        .values_list("job_id", "gpu_id", "node_id")
    )
    # Each job's rows are one block of the grid.
    blocks: dict[int, tuple[int, int]] = {}
    for k, (job_id, _, _) in enumerate(allocations):
        lo, _ = blocks.get(job_id, (k, k))
        blocks[job_id] = (lo, k + 1)
    blocks = {j: b for j, b in blocks.items() if b[1] - b[0] >= 2}
    if not blocks:
        return 0
    gpu_ids = [a[1] for a in allocations]
    grid = gpus_minute_grid(gpu_ids, minutes[0], minutes[-1], (*STRAGGLER_METRICS, IDLE_METRIC))
    found: list[tuple[tuple, dict[str, list[tuple[float, float]]]]] = []
    for lo, hi in blocks.values():
        mine = {m: values[lo:hi] for m, values in grid.items()}
        for k, metrics in _stragglers_grid(
            mine, STRAGGLER_RATIO, settings.VIGIL_BUSY_UTIL_PCT
        ).items():
            found.append((allocations[lo + k], metrics))
    if not found:
        return 0
    jobs = {
        j.id: j
        for j in Job.objects.filter(id__in={row[0] for row, _ in found}).only(
            "id", "cluster_id", "start_at"
        )
    }
    # Already reported in this run of the job.
    seen = {
        (job_id, gpu_id)
        for job_id, gpu_id, at in FailureEvent.objects.filter(
            kind=FailureKind.PERFORMANCE,
            job_id__in=jobs,
            gpu_id__in={row[1] for row, _ in found},
        ).values_list("job_id", "gpu_id", "occurred_at")
        if jobs[job_id].start_at is None or at >= jobs[job_id].start_at
    }
    gpus = Gpu.objects.select_related("node").in_bulk({row[1] for row, _ in found})
    opened = 0
    for (job_id, gpu_id, node_id), metrics in found:
        if (job_id, gpu_id) in seen:
            continue
        job = jobs[job_id]
        gpu = gpus[gpu_id]
        evidence = [
            {
                "file": "telemetry",
                "line": i + 1,
                "text": f"{minutes[i]:%H:%M} {metric} {value:.3g} vs job median {median:.3g}",
                "rule_id": f"straggler-{metric}",
            }
            for metric, trail in metrics.items()
            for i, (value, median) in enumerate(trail)
            if value is not None
        ]
        first_metric, trail = next(iter(metrics.items()))
        share = statistics.fmean(v / m for v, m in trail if v is not None)
        now_ts = timezone.now()
        failure = FailureEvent.objects.create(
            cluster_id=job.cluster_id,
            kind=FailureKind.PERFORMANCE,
            job_id=job_id,
            node_id=node_id,
            gpu_id=gpu_id,
            occurred_at=minutes[0],
            detected_at=now_ts,
            diagnosed_at=now_ts,
            source=DiagnosisSource.RULES,
            rule_id="straggler",
            detail=(
                f"straggler: GPU {gpu.index} on {gpu.node.hostname} at {share:.0%} of the job's "
                f"median {' / '.join(metrics)} for {n_minutes} min"
            ),
            evidence=evidence[: engine.EVIDENCE_LINES * 2],
            blamed_node_id=node_id,
            blamed_gpu_id=gpu_id,
            blamed_host=gpu.node.hostname,
            blamed_gpu_label=str(gpu.index),
            confidence=STRAGGLER_CONFIDENCE,
        )
        FailureInputs.objects.create(
            failure=failure,
            data={"metrics": {m: t for m, t in metrics.items()}, "first": first_metric},
            stored_at=now_ts,
        )
        opened += 1
    return opened
