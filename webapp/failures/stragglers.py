"""Stragglers: fail-slow GPUs of running jobs, found from the 1-minute telemetry rollup.

A straggler is a performance event for operations, not a failure label (no cause, not counted
in MTBF). Plain data in `stragglers_find`; `stragglers_detect` reads telemetry through
webapp.telemetry.selectors and records what it finds.
"""

from __future__ import annotations

import bisect
import statistics
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from webapp.failures import diagnosis as engine
from webapp.failures.models import DiagnosisSource, FailureEvent, FailureKind
from webapp.fleet.models import Gpu
from webapp.jobs.choices import JobState
from webapp.jobs.models import JobAllocation
from webapp.telemetry.selectors import gpus_minute_means

# A GPU that runs at under 0.8x its job's median for settings.VIGIL_STRAGGLER_MINUTES
# (default 10) straight minutes is a straggler: failure-signatures.md section 8 calls a rank a
# straggler when its iteration time stays above 1.1-1.25x the baseline; 1 / 1.25 = 0.8 of the
# peers' activity, power or clock. It is a performance event for operations, not a failure
# label (no cause, not counted in MTBF).
STRAGGLER_RATIO = 0.8
STRAGGLER_METRICS = ("sm_active", "power_w", "sm_clock_mhz")
# Shown with the event: the rule is a ratio held for minutes, not a signature in a log, and
# the same value as a cause told by a name alone (diagnosis.NAME_ONLY_CONFIDENCE).
STRAGGLER_CONFIDENCE = 0.6


def stragglers_find(
    series: dict[int, dict[datetime, dict[str, float | None]]],
    minutes: list[datetime],
    ratio: float = STRAGGLER_RATIO,
) -> dict[int, dict[str, list[tuple[float, float]]]]:
    """Plain data in, stragglers out: {gpu: {minute: {metric: mean}}} of one job's GPUs over
    `minutes` -> {gpu: {metric: [(value, median of the others), ...] per minute}} for each GPU
    below `ratio` x the others' median in every minute, for some metric.

    Linear in the job's GPUs (times log for one sort per minute and metric): the median of
    "the others" is read from the minute's sorted values with the GPU's own value left out,
    never by building every other GPU's list again (issue 17: that was quadratic, 11-20 s a
    pass with jobs of 2,000 GPUs).
    """
    out: dict[int, dict[str, list[tuple[float, float]]]] = {}
    if len(series) < 2:
        return out
    empty: dict[str, float | None] = {}
    for metric in STRAGGLER_METRICS:
        # Who is still below the others' median in every minute so far, with the trail.
        trails: dict[int, list[tuple[float, float]]] = {gpu: [] for gpu in series}
        for minute in minutes:
            values = {
                gpu: v
                for gpu in trails
                if (v := series[gpu].get(minute, empty).get(metric)) is not None
            }
            everyone = sorted(
                v
                for per in series.values()
                if (v := per.get(minute, empty).get(metric)) is not None
            )
            for gpu in list(trails):
                mine = values.get(gpu)
                median = None if mine is None else _median_without(everyone, mine)
                if median is None or median <= 0 or mine >= ratio * median:
                    del trails[gpu]
                else:
                    trails[gpu].append((mine, median))
            if not trails:
                break
        for gpu, trail in trails.items():
            if trail:
                out.setdefault(gpu, {})[metric] = trail
    return out


def _median_without(ordered: list[float], value: float) -> float | None:
    """The median of `ordered` (sorted, holding `value`) with one `value` left out; None if
    nothing is left. Equal to statistics.median of the rest: which copy of `value` goes does
    not change the rest."""
    n = len(ordered) - 1
    if n < 1:
        return None
    at = bisect.bisect_left(ordered, value)

    def rest(k: int) -> float:  # the k-th value of the rest
        return ordered[k] if k < at else ordered[k + 1]

    if n % 2:
        return rest(n // 2)
    return (rest(n // 2 - 1) + rest(n // 2)) / 2


def stragglers_detect(now: datetime | None = None) -> int:
    """Open a `performance` FailureEvent for each straggling GPU of a running job (once per
    job run and GPU); how many were opened. Reads the 1-minute rollup."""
    n_minutes = settings.VIGIL_STRAGGLER_MINUTES
    end = (now or timezone.now()).replace(second=0, microsecond=0)
    minutes = [end - timedelta(minutes=k) for k in range(n_minutes, 0, -1)]
    allocations = list(
        JobAllocation.objects.filter(
            end__isnull=True,
            gpu__isnull=False,
            start__lte=minutes[0],
            job__state=JobState.RUNNING,
        ).values_list("job_id", "gpu_id", "node_id", "job__cluster_id", "job__start_at")
    )
    by_job: dict[int, list[tuple]] = {}
    for row in allocations:
        by_job.setdefault(row[0], []).append(row)
    by_job = {j: rows for j, rows in by_job.items() if len(rows) >= 2}
    if not by_job:
        return 0
    gpu_ids = [r[1] for rows in by_job.values() for r in rows]
    data = gpus_minute_means(gpu_ids, minutes[0], minutes[-1], STRAGGLER_METRICS)
    opened = 0
    for job_id, rows in by_job.items():
        row_of = {r[1]: r for r in rows}
        series = {gpu_id: data.get(gpu_id, {}) for gpu_id in row_of}
        found = stragglers_find(series, minutes)
        for gpu_id, metrics in found.items():
            row = row_of[gpu_id]
            if FailureEvent.objects.filter(
                kind=FailureKind.PERFORMANCE, job_id=job_id, gpu_id=gpu_id, occurred_at__gte=row[4]
            ).exists():
                continue
            gpu = Gpu.objects.select_related("node").get(pk=gpu_id)
            evidence = [
                {
                    "file": "telemetry",
                    "line": i + 1,
                    "text": f"{minutes[i]:%H:%M} {metric} {value:.3g} vs job median {median:.3g}",
                    "rule_id": f"straggler-{metric}",
                }
                for metric, trail in metrics.items()
                for i, (value, median) in enumerate(trail)
            ]
            first_metric, trail = next(iter(metrics.items()))
            share = statistics.fmean(v / m for v, m in trail)
            now_ts = timezone.now()
            FailureEvent.objects.create(
                cluster_id=row[3],
                kind=FailureKind.PERFORMANCE,
                job_id=job_id,
                node_id=row[2],
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
                blamed_node_id=row[2],
                blamed_gpu_id=gpu_id,
                blamed_host=gpu.node.hostname,
                blamed_gpu_label=str(gpu.index),
                confidence=STRAGGLER_CONFIDENCE,
                inputs={"metrics": {m: t for m, t in metrics.items()}, "first": first_metric},
            )
            opened += 1
    return opened
