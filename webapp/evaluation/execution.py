"""The worker's side of an evaluation: submit a run's plan to Slurm, follow its jobs through
the jobs app, retry a failed job once, and record what the run measured.

Runs on the cluster's scheduler worker (queue `recovery.<cluster>`: the host with the Slurm
CLI and a `SLURM_CONF`, as the recovery executor). The jobs are ordinary Slurm jobs: the
cluster's Slurm watcher reports them to the jobs app like any other (typed `eval` by their
name), and `run_track` reads their state from there, never from Slurm itself.

A failed job (a trial's inference, its metrics, a node's loader) is submitted again once,
with the jobs that depend on it (Slurm cancelled those: `--kill-on-invalid-dep`); failing a
second time it is reported and its dependents are cancelled. Nothing else waits for it, so
the other trials go on.
"""

from __future__ import annotations

import logging
import os
import shlex
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.core import workrows
from webapp.core.scheduler import command_run, private_dir
from webapp.core.workrows import Outcome
from webapp.evaluation import slurm
from webapp.evaluation.actuals import (
    RanJob,
    gpu_time_s,
    latency_gaps,
    makespan_s,
    measured_estimates,
)
from webapp.evaluation.choices import FINAL_JOB_STATUSES, JobStatus, PlanKind, RunStatus
from webapp.evaluation.estimates import LEARN_WEIGHT, Estimate, estimates_learn
from webapp.evaluation.models import (
    EvaluationJob,
    EvaluationRun,
    RuntimeEstimate,
    SchedulerLatency,
)
from webapp.evaluation.planner import DISPATCH_S
from webapp.evaluation.selectors import cluster_capacity, estimates_known
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job

log = logging.getLogger("vigil.evaluation")
# What submitting and tracking change on a run's jobs.
_TRACKED = (
    "scheduler_id",
    "attempts",
    "submitted_at",
    "status",
    "start_at",
    "end_at",
    "measured",
    "error",
)

# The issue: a failed trial is retried once, then reported.
MAX_ATTEMPTS = 2
# A submitted job the jobs app has not heard of after this long is reported, not waited for:
# the cluster's Slurm watcher polls every agent interval (10 s by default), 60 times over.
UNSEEN_AFTER = timedelta(minutes=10)
UNSEEN = (
    "the jobs app never heard of this Slurm job: is the cluster's Slurm watcher running "
    "(vigil-collector --jobs slurm)?"
)
# Slurm's submit time against the worker's clock: NTP keeps hosts far closer than this.
SUBMIT_SKEW = timedelta(minutes=5)


class SubmitError(RuntimeError):
    pass


def _tool(name: str) -> str:
    bindir = settings.VIGIL_SLURM_BIN_DIR
    return str(Path(bindir) / name) if bindir else name


def _workdir(run: EvaluationRun) -> Path:
    return Path(settings.VIGIL_EVAL_WORKDIR) / f"run-{run.pk}"


def _report(run: EvaluationRun, job: EvaluationJob) -> Path:
    return _workdir(run) / f"{job.key}.{job.attempts}.json"


def _submit(run: EvaluationRun, job: EvaluationJob, ids: dict[str, str]) -> None:
    """sbatch one job (its next attempt) after the jobs it depends on (their current ids)."""
    workdir = _workdir(run)
    outputs = workdir / "outputs"
    # Only Vigil's user may look at a run's scripts and outputs (shared storage).
    try:
        private_dir(workdir.parent)
        private_dir(workdir)
        outputs.mkdir(exist_ok=True)
    except OSError as exc:
        raise SubmitError(f"work folder: {exc}") from None
    job.attempts += 1
    script = workdir / f"{job.key}.{job.attempts}.sh"
    script.write_text(
        slurm.job_script(
            shlex.split(settings.VIGIL_EVAL_PROGRAM),
            kind=job.kind,
            model_path=run.model_path,
            datasets=job.datasets,
            phases=job.planned_phases,
            outputs=outputs,
            report=_report(run, job),
        )
    )
    os.chmod(script, 0o700)
    argv = slurm.sbatch_argv(
        run_id=run.pk,
        key=job.key,
        kind=job.kind,
        node=run.node_names[job.node_index],
        after=[ids[k] for k in job.depends_on],
        workdir=workdir,
        script=script,
    )
    result = command_run([_tool(argv[0]), *argv[1:]])
    if not result.ok:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SubmitError(f"sbatch of {job.key} failed (exit {result.returncode}): {last}")
    job.scheduler_id = result.stdout.strip().split(";")[0]
    job.submitted_at = timezone.now()
    job.status = JobStatus.SUBMITTED
    job.start_at = job.end_at = None
    job.measured = {}
    ids[job.key] = job.scheduler_id


def _cancel(ids: list[str]) -> None:
    if ids:
        command_run([_tool("scancel"), "--", *ids])


def _orphans_cancel(run_id: int) -> None:
    """Jobs of this run a worker submitted before it died (its transaction rolled back)."""
    found = command_run([_tool("squeue"), "-h", "-o", "%i %k"])
    mine = [
        line.split()[0]
        for line in found.stdout.splitlines()
        if line.split()[1:] == [f"vigil-eval-{run_id}"]
    ]
    _cancel(mine)


# A planned run is claimed to submit it; one whose worker died mid-submit (its jobs rolled
# back, those Slurm took are cancelled as orphans) is claimed again once its lease is over.
LEASE = workrows.LeaseSpec(EvaluationRun, claimable=(RunStatus.PLANNED,), running=RunStatus.RUNNING)
# How long submitting a run's jobs may take (one sbatch each) before another worker may.
SUBMIT_LEASE_S = 600.0


def run_submit(run_id: int, worker: str = "worker") -> Outcome:
    """Claim a planned run and submit its jobs. Outcome: running (track it from now on),
    failed (why in the note), held by another worker (come back when its lease ends), or
    not_planned (its status in the note): nothing to submit."""
    now = timezone.now()
    if not workrows.claim(LEASE, run_id, worker, SUBMIT_LEASE_S, submitted_at=now):
        found = workrows.not_claimed(LEASE, EvaluationRun.objects.filter(pk=run_id).first())
        if found.retry_in_s is None:
            # Submitted already, or ended: nothing to submit, nor to track a second time.
            return Outcome("not_planned", note=found.status)
        return found
    with transaction.atomic():
        run = EvaluationRun.objects.select_for_update().get(pk=run_id)
        _orphans_cancel(run.pk)
        fit = nodes_choose(run)
        jobs = list(run.jobs.order_by("order"))
        if len(fit) < run.nodes:
            error = f"nodes: only {len(fit)} in service now"
            workrows.finish(LEASE, run.pk, RunStatus.FAILED, error=error)
            return Outcome(RunStatus.FAILED, note=error)
        run.node_names = fit[: run.nodes]
        ids: dict[str, str] = {}
        try:
            for job in jobs:
                _submit(run, job, ids)
        except SubmitError as exc:
            _cancel(list(ids.values()))
            workrows.finish(
                LEASE, run.pk, RunStatus.FAILED, error=str(exc), node_names=run.node_names
            )
            return Outcome(RunStatus.FAILED, note=str(exc))
        # The lease ends here: a running run without one is tracked (run_track).
        workrows.finish(LEASE, run.pk, RunStatus.RUNNING, node_names=run.node_names)
        EvaluationJob.objects.bulk_update(jobs, _TRACKED)
    return Outcome(RunStatus.RUNNING)


def nodes_choose(run: EvaluationRun) -> list[str]:
    """The cluster's nodes with enough GPUs, those fewest other running evaluations use first
    (two evaluations at once then get nodes of their own), by name within that."""
    busy: dict[str, int] = {}
    others = EvaluationRun.objects.filter(cluster_id=run.cluster_id, status=RunStatus.RUNNING)
    for names in others.exclude(pk=run.pk).values_list("node_names", flat=True):
        for name in names:
            busy[name] = busy.get(name, 0) + 1
    fit = [n.hostname for n in cluster_capacity(run.cluster_id) if n.gpus >= run.gpus_per_node]
    return sorted(fit, key=lambda h: (busy.get(h, 0), h))


def _unseen(job: EvaluationJob) -> bool:
    return (
        job.status == JobStatus.SUBMITTED
        and job.submitted_at is not None
        and timezone.now() - job.submitted_at > UNSEEN_AFTER
    )


def _dependents(jobs: list[EvaluationJob], key: str) -> list[EvaluationJob]:
    """Every job that waits on `key`, directly or not, in submission order."""
    wanted = {key}
    out = []
    for job in jobs:
        if wanted.intersection(job.depends_on):
            wanted.add(job.key)
            out.append(job)
    return out


def run_track(run_id: int) -> float | None:
    """Bring a running run's jobs up to date from the jobs app; retry or report failures;
    finish the run when every job is final. Seconds until the next look, or None."""
    with transaction.atomic():
        run = EvaluationRun.objects.select_for_update().get(pk=run_id)
        if run.status != RunStatus.RUNNING:
            return None
        jobs = list(run.jobs.order_by("order"))
        by_key = {j.key: j for j in jobs}
        ids = {j.key: j.scheduler_id for j in jobs}
        rows = {
            r.scheduler_id: r
            for r in Job.objects.filter(
                cluster_id=run.cluster_id,
                # Not an older job that had the same id (Slurm's ids restart with its state).
                submit_at__gte=run.submitted_at - SUBMIT_SKEW,
                scheduler_id__in=[
                    j.scheduler_id for j in jobs if j.status not in FINAL_JOB_STATUSES
                ],
            )
        }
        for job in jobs:
            if job.status in FINAL_JOB_STATUSES:
                continue
            row = rows.get(job.scheduler_id)
            if row is None and _unseen(job):
                # Retrying cannot help: nothing reports this cluster's jobs to Vigil.
                _failed(run, jobs, job, UNSEEN, ids, retry=False)
                continue
            if row is None or row.state == JobState.PENDING:
                continue
            job.start_at = row.start_at
            if row.state == JobState.RUNNING:
                job.status = JobStatus.RUNNING
                continue
            job.end_at = row.end_at
            if row.state == JobState.COMPLETED:
                job.status = JobStatus.COMPLETED
                job.measured = slurm.report_read(_report(run, job))
                continue
            upstream = [by_key[k] for k in job.depends_on]
            if row.state == JobState.CANCELLED and any(
                u.status != JobStatus.COMPLETED for u in upstream
            ):
                continue  # Slurm dropped it because what it waits for failed: handled there
            _failed(run, jobs, job, row.state, ids)
        if all(j.status in FINAL_JOB_STATUSES for j in jobs):
            _finish(run, jobs)
        EvaluationJob.objects.bulk_update(jobs, _TRACKED)
    return None if run.status != RunStatus.RUNNING else settings.VIGIL_EVAL_TRACK_S


def _failed(
    run: EvaluationRun,
    jobs: list[EvaluationJob],
    job: EvaluationJob,
    state: str,
    ids: dict,
    *,
    retry: bool = True,
) -> None:
    after = _dependents(jobs, job.key)
    old = [d.scheduler_id for d in after if d.status not in FINAL_JOB_STATUSES]
    if retry and job.attempts < MAX_ATTEMPTS:
        log.info("evaluation %s: %s ended %s, submitting it again", run.pk, job.key, state)
        job.error = f"attempt {job.attempts}: {state}"
        _cancel(old)
        try:
            _submit(run, job, ids)
            for d in after:
                if d.status != JobStatus.COMPLETED:
                    _submit(run, d, ids)
            return
        except SubmitError as exc:
            state = f"{state}; the retry could not be submitted: {exc}"
    job.status = JobStatus.FAILED
    job.error = f"{job.error + '; ' if job.error else ''}attempt {job.attempts}: {state}"
    _cancel(old)
    for d in after:
        if d.status not in FINAL_JOB_STATUSES:
            d.status = JobStatus.CANCELLED
            d.error = f"not run: {job.key} failed"


def _epoch(dt) -> float | None:
    return dt.timestamp() if dt is not None else None


def _finish(run: EvaluationRun, jobs: list[EvaluationJob]) -> None:
    ran = []
    for j in jobs:
        spans = list(j.measured.values())
        start = min((s[0] for s in spans), default=_epoch(j.start_at))
        end = max((s[1] for s in spans), default=_epoch(j.end_at))
        ran.append(
            RanJob(
                j.key, j.kind, j.datasets, j.status == JobStatus.COMPLETED, start, end, j.measured
            )
        )
    span = makespan_s(ran, run.submitted_at.timestamp()) if run.submitted_at else None
    run.actual_makespan_s = span
    if span is not None:
        run.actual_gpu_time_s = gpu_time_s(ran, run.nodes * run.gpus_per_node, span)
    run.finished_at = timezone.now()
    bad = [j.key for j in jobs if j.status != JobStatus.COMPLETED]
    run.status = RunStatus.PARTIAL if bad else RunStatus.DONE
    if bad:
        run.error = f"{len(bad)} jobs did not complete: {', '.join(bad[:10])}"
    run.save()
    planned = {
        e["dataset"]: Estimate(e["dataset"], e["load_s"], e["infer_s"], e["metrics_s"])
        for e in run.prediction.get("estimates", [])
    }
    measured = measured_estimates(ran, planned, coupled=run.plan == PlanKind.BASELINE)
    estimates_store(measured)
    if run.submitted_at is not None:
        latency_learn(run, jobs, ran)


def latency_learn(run: EvaluationRun, jobs: list[EvaluationJob], ran: list[RanJob]) -> None:
    """Blend this run's median scheduler latencies into the cluster's (a moving average)."""
    dispatch, dependency = latency_gaps(
        ran, {j.key: j.depends_on for j in jobs}, run.gpus_per_node, run.submitted_at.timestamp()
    )
    row = SchedulerLatency.objects.filter(cluster_id=run.cluster_id).first()
    if row is None:
        row = SchedulerLatency(
            cluster_id=run.cluster_id, dispatch_s=DISPATCH_S, dependency_s=DISPATCH_S
        )
    for field, gaps in (("dispatch_s", dispatch), ("dependency_s", dependency)):
        if gaps:
            median = sorted(gaps)[len(gaps) // 2]
            old = getattr(row, field) if row.runs else median
            setattr(row, field, (1 - LEARN_WEIGHT) * old + LEARN_WEIGHT * median)
    row.runs += 1
    row.save()


def estimates_store(measured: list[Estimate]) -> int:
    """Blend measured estimates into the learned ones (estimates.estimates_learn)."""
    if not measured:
        return 0
    names = [m.dataset for m in measured]
    known = {k: v for k, v in estimates_known().items() if k in names}
    learned = estimates_learn(known, measured)
    for name in names:
        e = learned[name]
        row, created = RuntimeEstimate.objects.get_or_create(
            dataset=name,
            defaults={
                "load_s": e.load_s,
                "infer_s": e.infer_s,
                "metrics_s": e.metrics_s,
                "runs": 1,
            },
        )
        if not created:
            row.load_s, row.infer_s, row.metrics_s = e.load_s, e.infer_s, e.metrics_s
            row.runs += 1
            row.save()
    return len(names)
