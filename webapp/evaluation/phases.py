"""Evaluation jobs' GPU time by phase (docs/acme-workload.md §6), for the characterization
page and its CSV.

From the samples (raw or compacted; the 1-minute rollup once they are dropped) of the GPUs that
ended evaluation jobs held: loading is the time before the GPU's first busy sample, when its
memory rose meanwhile (the model arriving) with SM activity near zero; inference runs from the
first busy sample to the last; metrics are the time the GPU stayed held and idle after it. Held
time with no busy sample, or before it without memory rising, is idle. The paper's HumanEval
profile: loading 29.5%, metrics 19%.

The allocations come from jobs' read API, the samples from telemetry's; the jobs app asks for
the split through `jobs.dispatch.eval_phases_wanted`, which `eval_phases_answer` answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from webapp.core.units import GIB
from webapp.core.windows import Window
from webapp.jobs.choices import JobType
from webapp.jobs.dispatch import eval_phases_wanted
from webapp.jobs.selectors import allocations_ended
from webapp.telemetry.selectors import GpuInterval, intervals_activity, telemetry_kept_since

# "Near zero": under 5% of SMs active (an idle A100 reads 0: docs/acme-workload.md §5, p25 = 0).
EVAL_BUSY_SM = 0.05
# The model arriving: at least 1 GiB more framebuffer in use before inference than at first.
EVAL_LOAD_RISE_BYTES = GIB
# The newest allocations read (raw samples of each): bounds the page's cost on a busy cluster.
EVAL_ALLOCATIONS_MAX = 2000
EVAL_PAPER_SHARES = {"load": 0.295, "metrics": 0.19}
EVAL_PHASES = ("load", "infer", "metrics", "idle")


@dataclass
class EvalPhases:
    jobs: int
    allocations: int
    limited: bool  # only the newest EVAL_ALLOCATIONS_MAX allocations were read
    from_rollup: int  # allocations read from the 1-minute rollup (older than samples are kept)
    gpu_s: dict[str, float]
    share: dict[str, float | None]
    paper: dict[str, float] = field(default_factory=lambda: dict(EVAL_PAPER_SHARES))

    @property
    def gpu_h(self) -> dict[str, float]:
        return {k: v / 3600 for k, v in self.gpu_s.items()}


def _eval_spans(
    start: datetime, stop: datetime, first_busy: datetime | None, last_busy: datetime | None
) -> tuple[float, float | None, float | None, float | None]:
    """Held, before-busy, busy and after-busy seconds of one allocation (None: never busy)."""
    held = (stop - start).total_seconds()
    if first_busy is None or last_busy is None:
        return held, None, None, None
    return (
        held,
        (first_busy - start).total_seconds(),
        (last_busy - first_busy).total_seconds(),
        (stop - last_busy).total_seconds(),
    )


def eval_phase_split(
    held_s: float, pre_s: float | None, busy_s: float | None, post_s: float | None, rise: float
) -> dict[str, float]:
    """One allocation's held seconds by phase (see above); plain arithmetic, tested alone."""
    if pre_s is None or busy_s is None or post_s is None:
        return {"load": 0.0, "infer": 0.0, "metrics": 0.0, "idle": held_s}
    loading = rise >= EVAL_LOAD_RISE_BYTES
    return {
        "load": pre_s if loading else 0.0,
        "infer": busy_s,
        "metrics": post_s,
        "idle": 0.0 if loading else pre_s,
    }


def eval_phases(window: Window, now: datetime | None = None) -> EvalPhases:
    """GPU time by phase of the window's ended evaluation jobs: from their samples (raw or
    compacted), and from the 1-minute rollup for allocations older than samples are kept
    (telemetry's intervals_activity). Older than the 1-minute rollup keeps, phases of jobs
    that last minutes cannot be told apart in hourly cells: those allocations are left out."""
    now = now or timezone.now()
    kept = telemetry_kept_since(now)
    far_future = now + timedelta(days=36500)
    rows: list[tuple] = []
    from_rollup = 0
    # The newest allocations with samples first, then older ones up to the same limit.
    for lo, hi in ((kept.samples, far_future), (kept.minute, kept.samples)):
        left = EVAL_ALLOCATIONS_MAX - len(rows)
        if left <= 0:
            break
        held = allocations_ended(window, JobType.EVAL, lo, hi, left)
        read = intervals_activity(
            [GpuInterval(n, a.gpu_id, a.start, a.stop) for n, a in enumerate(held)],
            busy="sm_active",
            busy_at=EVAL_BUSY_SM,
            rise="fb_used_bytes",
            now=now,
        )
        for n, act in read.items():
            a = held[n]
            rows.append(
                (a.job_id, *_eval_spans(a.start, a.stop, act.first_busy, act.last_busy), act.rise)
            )
            from_rollup += act.tier != "samples"
    gpu_s = dict.fromkeys(EVAL_PHASES, 0.0)
    for _job, held, pre, busy, post, rise in rows:
        for phase, seconds in eval_phase_split(held, pre, busy, post, rise or 0).items():
            gpu_s[phase] += seconds
    total = sum(gpu_s.values())
    return EvalPhases(
        jobs=len({r[0] for r in rows}),
        allocations=len(rows),
        limited=len(rows) >= EVAL_ALLOCATIONS_MAX,
        from_rollup=from_rollup,
        gpu_s=gpu_s,
        share={k: _share(v, total) for k, v in gpu_s.items()},
    )


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def eval_phases_answer(sender: object, window: Window, **kwargs: object) -> EvalPhases:
    """The characterization's question (jobs.dispatch.eval_phases_wanted), answered."""
    return eval_phases(window)


eval_phases_wanted.connect(eval_phases_answer, dispatch_uid="evaluation.eval_phases")
