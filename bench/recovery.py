"""Time from a GPU failing on a node to its job running again elsewhere, on a real Slurm.

    .venv/bin/python bench/recovery.py [--runs 10]

Needs root and Debian's slurm-wlm (`make test` installs it). Starts its own embedded
PostgreSQL and Redis in a temporary folder and a two-node Slurm on this host (tests/slurm.py),
then the recovery rig of tests/recovery/rig.py: the node agent of vn1 (fake NVML, a kernel
log file, the Slurm watcher), a worker for ingest and diagnosis and one on the recovery
queue. Each run:
  1. a job starts on vn1 and Vigil has seen it start;
  2. an Xid 79 line is appended to vn1's kernel log (t0);
  3. the clock stops when `squeue` shows the job RUNNING again (on vn2), requeued once.
Phases: to the failure on record (agent + ingest), to the drain done, to the requeue done
(Vigil's part), and from the requeue to RUNNING (Slurm's own scheduling, `slurm_sched_s`).
Between runs the node is resumed and the run's failure records are deleted: a GPU error
burst on one node within 3 minutes is one failure, and the breaker would remember the rest.
The baseline in the same run is the bare scheduler path: the same two commands typed at once
by hand (`scontrol requeue`, then `scontrol update StartTime=now` once the job is pending), to
RUNNING again: the floor that any recovery on this Slurm pays.
Then `--reset-runs` runs of the GPU reset path: an Xid 109 (NVIDIA's RESET_GPU) on vn1's GPU 0;
Vigil drains vn1, requeues the job, waits until no job holds vn1, resets the GPU (vn1's
`nvidia-smi` is the stand-in of tests/recovery/standin, on its jobs' PATH), health-checks vn1
and returns it to service. Timed the same way from t0: the job RUNNING again (`reset_*`), the
reset done (`reset_done_*`), vn1 back in service (`reset_back_*`).
Last line: JSON with median_s, p95_s, runs, and per phase medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import django_embedded, p95  # noqa: E402 (after the path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--reset-runs", type=int, default=5)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="vigil-bench-recovery-"))
    django_embedded(str(tmp / "data"), debug=True, unset=())
    from django.core.management import call_command

    from tests.recovery.gpunode import GpuNodeCluster
    from tests.recovery.rig import Rig
    from tests.slurm import slurm_missing_reason
    from webapp.core import embedded
    from webapp.failures.models import FailureEvent, GpuErrorEvent
    from webapp.jobs.models import JobEvent
    from webapp.recovery.models import RecoveryAction, RecoveryPolicy

    reason = slurm_missing_reason()
    if reason:
        sys.exit(f"bench/recovery.py: {reason}")
    # No RebootProgram: an Xid 79's reboot (after the requeue, off the clock) is refused, and
    # vn1 can be resumed at once for the next run.
    slurm = GpuNodeCluster(
        Path(tempfile.mkdtemp(prefix="vigil-slurm-")), nodes=["vn1", "vn2"], reboot=False
    )
    rig = None
    try:
        call_command("migrate", verbosity=0)
        slurm.start()
        rig = Rig(slurm, tmp, os.environ["DATABASE_URL"])
        rig.vigil(mode="auto")
        # Each run drains vn1: the hourly cap of the guard rails is not what is measured.
        RecoveryPolicy.objects.update(max_drains_per_hour=10_000)
        rig.start()
        vn1 = rig.agent_node

        baseline = []
        for _ in range(3):
            job = rig.submit_on_agent_node("--gres=gpu:8", "--wrap", "sleep 600")
            t0 = time.monotonic()
            slurm.run("scontrol", "requeue", job)
            while rig.job(job).get("JobState") != "PENDING":
                time.sleep(0.02)
            slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
            rig.wait_running(job, restarts=1)
            baseline.append(time.monotonic() - t0)
            slurm.cancel_all()

        totals, detect, drained, requeued, sched = [], [], [], [], []
        for i in range(args.runs):
            job = rig.submit_on_agent_node("--gres=gpu:8", "--wrap", "sleep 600")
            while not JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists():
                time.sleep(0.05)
            t0_wall = rig.xid(79)
            t0 = time.monotonic()
            try:
                info = rig.wait_running(job, restarts=1, timeout=120)
            except AssertionError:
                seen = list(RecoveryAction.objects.values_list("kind", "status", "result", "error"))
                sys.exit(
                    f"bench/recovery.py: run {i + 1}: no requeue; actions {seen}\n{rig.logs()}"
                )
            total = time.monotonic() - t0
            failure = FailureEvent.objects.filter(kind="gpu_error").latest("detected_at")
            actions = {a.kind: a for a in RecoveryAction.objects.filter(plan__failure=failure)}
            if "drain" not in actions or "requeue" not in actions:
                seen = list(
                    RecoveryAction.objects.values_list("kind", "status", "host", "rule", "result")
                )
                sys.exit(f"bench/recovery.py: run {i + 1}: failure {failure.cause}, actions {seen}")
            drain_end = actions["drain"].ended_at.timestamp() - t0_wall
            requeue_end = actions["requeue"].ended_at.timestamp() - t0_wall
            totals.append(total)
            detect.append(failure.detected_at.timestamp() - t0_wall)
            drained.append(drain_end)
            requeued.append(requeue_end)
            sched.append(total - requeue_end)
            print(
                f"run {i + 1}: {total:.2f} s to RUNNING on {info['NodeList']} (detected "
                f"{detect[-1]:.2f}, drained {drain_end:.2f}, requeued {requeue_end:.2f})",
                file=sys.stderr,
            )
            slurm.cancel_all()
            slurm.run("scontrol", "update", f"NodeName={vn1}", "State=RESUME")
            # The next GPU error is a failure of its own, not a repeat of this burst.
            GpuErrorEvent.objects.all().delete()
            FailureEvent.objects.all().delete()
            time.sleep(1.5)  # the watcher reports vn1 up again before the next failure

        resets = _reset_runs(rig, args.reset_runs)
        median = statistics.median
        result = {
            "runs": len(totals),
            "median_s": round(median(totals), 3),
            "p95_s": round(p95(totals), 3),
            "vigil_median_s": round(median(requeued), 3),
            "vigil_p95_s": round(p95(requeued), 3),
            "slurm_sched_s": round(median(sched), 3),
            "slurm_sched_p95_s": round(p95(sched), 3),
            "detect_median_s": round(median(detect), 3),
            "drained_median_s": round(median(drained), 3),
            "baseline_manual_requeue_s": round(median(baseline), 3),
        }
        for key, values in resets.items():
            if values:
                result[f"{key}_median_s"] = round(median(values), 3)
                result[f"{key}_p95_s"] = round(p95(values), 3)
        result["reset_runs"] = len(resets["reset"])
    finally:
        if rig is not None:
            rig.stop()
        slurm.stop()
        embedded.stop_all()
    print(json.dumps(result))


def _reset_runs(rig, runs: int) -> dict[str, list[float]]:
    """The GPU reset path, `runs` times: seconds from the Xid 109 line to the job RUNNING
    again (`reset`), to the GPU reset done (`reset_done`), to vn1 back in service
    (`reset_back`)."""
    from webapp.failures.models import FailureEvent, GpuErrorEvent
    from webapp.jobs.models import JobEvent
    from webapp.recovery.models import RecoveryAction

    out: dict[str, list[float]] = {"reset": [], "reset_done": [], "reset_back": []}
    for i in range(runs):
        job = rig.submit_on_agent_node("--gres=gpu:8", "--wrap", "sleep 600")
        while not JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists():
            time.sleep(0.05)
        t0_wall = rig.xid(109)
        t0 = time.monotonic()
        rig.wait_running(job, restarts=1, timeout=120)
        total = time.monotonic() - t0
        deadline = time.monotonic() + 180
        resume = None
        while time.monotonic() < deadline:
            resume = RecoveryAction.objects.filter(kind="resume", status="succeeded").first()
            if resume is not None:
                break
            time.sleep(0.1)
        if resume is None:
            seen = list(RecoveryAction.objects.values_list("kind", "status", "result", "error"))
            sys.exit(
                f"bench/recovery.py: reset run {i + 1}: not back; actions {seen}\n{rig.logs()}"
            )
        reset = RecoveryAction.objects.get(plan_id=resume.plan_id, kind="reset_gpu")
        out["reset"].append(total)
        out["reset_done"].append(reset.ended_at.timestamp() - t0_wall)
        out["reset_back"].append(resume.ended_at.timestamp() - t0_wall)
        print(
            f"reset run {i + 1}: {total:.2f} s to RUNNING, GPU reset at "
            f"{out['reset_done'][-1]:.2f} s, vn1 back at {out['reset_back'][-1]:.2f} s",
            file=sys.stderr,
        )
        rig.slurm.cancel_all()
        GpuErrorEvent.objects.all().delete()
        FailureEvent.objects.all().delete()  # its plan and actions with it
        time.sleep(1.5)  # the watcher reports vn1 up again before the next failure
    return out


if __name__ == "__main__":
    main()
