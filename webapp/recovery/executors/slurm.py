"""Slurm: drain, requeue, roll back, health-check and resume through its CLI.

The commands are the ones an operator would type (`scontrol update NodeName=n1 State=DRAIN
Reason="vigil: gpu_off_bus failure 123"`, `scontrol requeue 4242`), run on the host of the
per-cluster recovery worker (queue `recovery.<cluster>`), which has the CLI and a
`SLURM_CONF` for the cluster. `VIGIL_SLURM_BIN_DIR` names the folder of the tools where they
are not on PATH.

After a crash, `done` asks Slurm whether an interrupted command took effect: a drain shows
its reason in `sinfo`, a requeue (or a rollback, which is a requeue with a resume point)
raised the job's `Restarts` count (read before the command), a resume left the node
undrained.

Vigil never runs a user's code as itself: a rollback requeues the user's own job, and the
jobs Vigil submits (the health check) get `--export=NONE`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

from webapp.recovery.executors.base import (
    CommandResult,
    Executor,
    Target,
    UnsupportedAction,
    command_run,
    private_dir,
)

# Wording of slurmctld being unreachable or busy (src/common/slurm_errno.c): retrying helps.
TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted|"
    r"Resource temporarily unavailable|Connection refused|backup controller in standby|"
    r"Slurm temporarily unable to accept job|Communication connection failure",
    re.IGNORECASE,
)
# Slurm job ids: a job, an array task (`_`) or a heterogeneous job's component (`+`).
SLURM_ID = re.compile(r"[0-9]+(?:_[0-9]+|\+[0-9]+)?")
# One node's name: no hostlist expression (`n[1-64]`, `a,b`), nothing scontrol reads as a key.
SLURM_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


# A PCI bus id as NVML gives it (`00000000:18:00.0`) or the short form (`0000:18:00.0`).
PCI_BUS_ID = re.compile(r"(?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
RESERVATION = re.compile(r"vigil-[A-Za-z0-9._-]{1,100}")
# Job states that hold a node (squeue's words): the GPU reset waits until none is left.
HOLDING = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED"


def bus_id(value: str) -> str:
    if not PCI_BUS_ID.fullmatch(value or ""):
        raise UnsupportedAction(
            f"GPU reset: {value!r} is not a PCI bus id (domain:bus:device.function)"
        )
    return value


def reservation_name(value: str) -> str:
    if not RESERVATION.fullmatch(value or ""):
        raise UnsupportedAction(f"reservation {value!r} is not one of Vigil's (vigil-...)")
    return value


def job_id(value: str) -> str:
    if not SLURM_ID.fullmatch(value):
        raise UnsupportedAction(
            f"job {value!r} is not a Slurm job id (digits, then _<task> or +<component>)"
        )
    return value


def node_name(value: str) -> str:
    if not SLURM_NODE.fullmatch(value):
        raise UnsupportedAction(
            f"node {value!r} is not one Slurm node name (letters, digits, '.', '_', '-')"
        )
    return value


# States a job does not leave (squeue's and sacct's words).
FINISHED = frozenset(
    {
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
        "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED",
    }
)  # fmt: skip
# How often a health check's job is asked about: it lasts minutes.
CHECK_POLL_S = 1.0
# Both restart the user's own job in place (a rollback also sets its resume point).
RESTARTS = ("requeue", "resubmit")
VERDICT = re.compile(r"^VIGIL-HEALTH\s+(\S+)\s+(PASS|FAIL)\b\s*(.*)$")


def drain_reason(target: Target) -> str:
    """`vigil: <cause> failure <id>` (what `sinfo -R` shows), or the action's own reason."""
    if target.params.get("reason"):
        return f"vigil: {target.params['reason']}"
    if target.failure_id is not None:
        return f"vigil: {target.cause or 'failure'} failure {target.failure_id}"
    return f"vigil: action {target.action_id}"


def healthcheck_output(target: Target) -> Path:
    if target.kind == "reset_gpu":
        return Path(settings.VIGIL_RECOVERY_WORKDIR) / f"gpu-reset-{target.action_id}.out"
    return Path(settings.VIGIL_RECOVERY_WORKDIR) / f"healthcheck-{target.action_id}.out"


def healthcheck_verdicts(text: str, hosts: Sequence[str]) -> dict[str, tuple[bool, str]]:
    """host -> (passed, detail) from the check's `VIGIL-HEALTH <node> PASS|FAIL ...` lines; a
    node of the check without a line failed ("no verdict")."""
    seen: dict[str, tuple[bool, str]] = {}
    for line in text.splitlines():
        m = VERDICT.match(line.strip())
        if m and m.group(1) in hosts:
            passed = m.group(2) == "PASS"
            # A node fails if any line says so (a check may print one line per round).
            if m.group(1) not in seen or not passed:
                seen[m.group(1)] = (passed, m.group(3).strip()[:200])
    return {h: seen.get(h, (False, "no verdict")) for h in hosts}


def check_comment(target: Target) -> str:
    """The health check job's comment: how a worker finds it again after a crash."""
    return f"vigil-action-{target.action_id}"


def _read_private(path: Path) -> str:
    """A file Vigil's own job wrote, never through a symlink someone put in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        return f.read()


def resume_comment(params: dict) -> str:
    """`vigil-resume:checkpoint=<step|previous>,skip=<first>-<last>` (skip may be empty)."""
    checkpoint = str(params.get("resume_checkpoint") or "previous")
    skip = str(params.get("skip_steps") or "")
    if not re.fullmatch(r"previous|\d+", checkpoint) or not re.fullmatch(r"(\d+-\d+)?", skip):
        raise UnsupportedAction(f"rollback: bad resume point {checkpoint!r}, skip {skip!r}")
    return f"vigil-resume:checkpoint={checkpoint},skip={skip}"


def _number(value: object) -> int | None:
    """A number of squeue's JSON: plain in Slurm 22.05, {"set", "number"} from 23.02."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def squeue_jobs_with_comment(text: str, comment: str, uid: int) -> list[str]:
    """Ids of the jobs of user `uid` carrying `comment`, from `squeue --json` output."""
    try:
        jobs = json.loads(text).get("jobs", [])
    except (ValueError, AttributeError):
        return []
    if not isinstance(jobs, list):
        return []
    return [
        str(r["job_id"])
        for r in jobs
        if isinstance(r, dict)
        and r.get("comment") == comment
        and r.get("user_id") == uid
        and _number(r.get("job_id")) is not None
    ]


def squeue_job(text: str, job: str) -> dict[str, str]:
    """The job's state and restart count from `squeue --json` output ({} if it is not there).

    JSON, not `scontrol show job`: there a job's name comes first and may hold `JobState=`
    or `WorkDir=` of its own, which a Key=Value reader takes for the job's. (22.05 lists
    every job whatever `--jobs` says: the job is picked here.)"""
    try:
        jobs = json.loads(text).get("jobs", [])
    except (ValueError, AttributeError):
        return {}
    main, sep, sub = job.replace("+", "_").partition("_")
    if not main.isdigit() or not (sub.isdigit() or not sep):
        return {}
    for record in jobs if isinstance(jobs, list) else []:
        if not isinstance(record, dict):
            continue
        if "+" in job:
            found = (_number(record.get("het_job_id")), _number(record.get("het_job_offset")))
        elif sep:
            found = (_number(record.get("array_job_id")), _number(record.get("array_task_id")))
        else:
            found = (_number(record.get("job_id")), None)
        if found != (int(main), int(sub) if sep else None):
            continue
        state = record.get("job_state")
        if isinstance(state, list):  # 23.02 and later: the base state and its flags
            state = state[0] if state else ""
        restarts = _number(record.get("restart_cnt"))
        return {
            "JobState": str(state or ""),
            "Restarts": "" if restarts is None else str(restarts),
        }
    return {}


class SlurmExecutor(Executor):
    kind = "slurm"

    def tool(self, name: str) -> str:
        bindir = settings.VIGIL_SLURM_BIN_DIR
        return str(Path(bindir) / name) if bindir else name

    def _drain(self, t: Target) -> list[list[str]]:
        drain = ["scontrol", "update", f"NodeName={node_name(t.host)}", "State=DRAIN"]
        return [[*drain, f"Reason={drain_reason(t)}"], *self._release(t)]

    def _resume(self, t: Target) -> list[list[str]]:
        if t.params.get("reservation"):
            # Resumed into the check's reservation already: ending it returns the node.
            return self._release(t)
        return [["scontrol", "update", f"NodeName={node_name(t.host)}", "State=RESUME"]]

    def _release(self, t: Target) -> list[list[str]]:
        name = t.params.get("reservation")
        return [["scontrol", "delete", f"ReservationName={name}"]] if name else []

    def _requeue(self, t: Target) -> list[list[str]]:
        # Slurm holds a requeued batch job back (Reason=BeginTime) before it may start again;
        # the bad node is drained already, so the job is made eligible at once.
        job = job_id(t.job)
        return [
            ["scontrol", "requeue", "--", job],
            ["scontrol", "update", f"JobId={job}", "StartTime=now"],
        ]

    def tolerated(self, argv: Sequence[str], target: Target, result: CommandResult) -> bool:
        if target.kind == "requeue" and "StartTime=now" in argv:
            return True  # making a requeued job eligible fails harmlessly once it started
        if target.kind == "health_check" and argv[0] == "sbatch" and result.returncode != 124:
            # A check exits non-zero when a node fails: that is its answer, not an error
            # (one that ran out of time and was cancelled has given no answer).
            try:
                return "VIGIL-HEALTH" in _read_private(healthcheck_output(target))
            except OSError:
                return False
        return False

    def _resubmit(self, t: Target) -> list[list[str]]:
        """Roll back: requeue the user's own job with the resume point in its comment.

        The job runs again as its owner, with the environment it was submitted with: Vigil
        never submits, nor runs, a user's script itself. The contract for training code
        (README, "Recovery"): a run whose comment reads
        `vigil-resume:checkpoint=<step|previous>,skip=<first>-<last>` (`squeue -h -j
        $SLURM_JOB_ID -o %k`) resumes from that checkpoint and skips those steps' data.
        The comment and the start are set in one update, before the held job may start.
        """
        job = job_id(t.job)
        return [
            ["scontrol", "requeue", "--", job],
            [
                "scontrol", "update", f"JobId={job}", f"Comment={resume_comment(t.params)}",
                "StartTime=now",
            ],
        ]  # fmt: skip

    def _reset_gpu(self, t: Target) -> list[list[str]]:
        """Reset one GPU (`nvidia-smi -r -i <bus id>`, NVIDIA's RESET_GPU) on a drained node.

        First wait until no job holds the node (the recorded `squeue` is asked until it lists
        none, `run`); then resume the node into a maintenance reservation only Vigil's user may
        use, with no end: no user job lands on it before it has passed its health check, and
        if Vigil stops half-way the node stays out of service; then run the reset as a job of
        Vigil's pinned to the node (`nvidia-smi` is the node's own, on its PATH). The health
        check and the resume that end the reservation are the plan's next actions."""
        host = node_name(t.host)
        bus = bus_id(t.params.get("bus_id", ""))
        name = reservation_name(t.params.get("reservation", ""))
        minutes = max(1, math.ceil(settings.VIGIL_HEALTHCHECK_TIMEOUT_S / 60))
        return [
            ["squeue", "-h", f"--nodelist={host}", f"--states={HOLDING}", "-o", "%i"],
            [
                "scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={host}",
                "StartTime=now", "Duration=UNLIMITED", f"Users={settings.VIGIL_SLURM_USER}",
                "Flags=MAINT,IGNORE_JOBS",
            ],
            ["scontrol", "update", f"NodeName={host}", "State=RESUME"],
            [
                "sbatch", "--parsable", "--export=NONE", f"--comment={check_comment(t)}",
                "--nodes=1", f"--nodelist={host}", "--exclusive", f"--time={minutes}",
                f"--job-name=vigil-gpu-reset-{t.action_id}", f"--output={healthcheck_output(t)}",
                f"--reservation={name}", f"--wrap=nvidia-smi -r -i {bus}",
            ],
        ]  # fmt: skip

    def _reboot(self, t: Target) -> list[list[str]]:
        """NVIDIA's RESTART_BM / RESTART_VM through the scheduler: slurmctld reboots the node
        once it is idle (ASAP keeps new jobs off it meanwhile) and returns it to service when
        it is back (its HealthCheckProgram runs before it takes jobs)."""
        host = node_name(t.host)
        return [
            ["scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={drain_reason(t)}", host]
        ]

    def _health_check(self, t: Target) -> list[list[str]]:
        hosts = [node_name(h) for h in t.params.get("hosts", [])]
        script = settings.VIGIL_HEALTHCHECK_SCRIPT
        minutes = max(1, math.ceil(settings.VIGIL_HEALTHCHECK_TIMEOUT_S / 60))
        before: list[list[str]] = []
        placed: list[str] = []
        if t.params.get("reserved"):
            # In the reservation a GPU reset made (and resumed the node into) already.
            placed = [f"--reservation={reservation_name(t.params.get('reservation', ''))}"]
        elif t.params.get("reservation"):
            # A drained node runs no job, the check's neither: resume it into a maintenance
            # reservation that only Vigil's user may use, so no user job lands on it before
            # it passed. The reservation ends by itself if nothing releases it.
            name = t.params["reservation"]
            before = [
                [
                    "scontrol", "create", "reservation", f"ReservationName={name}",
                    f"Nodes={','.join(hosts)}", "StartTime=now", f"Duration={minutes + 10}",
                    f"Users={settings.VIGIL_SLURM_USER}", "Flags=MAINT,IGNORE_JOBS",
                ],
                *(["scontrol", "update", f"NodeName={h}", "State=RESUME"] for h in hosts),
            ]  # fmt: skip
            placed = [f"--reservation={name}"]
        return [
            *before,
            [
                "sbatch",
                "--parsable",
                # Nothing of the worker's environment (Vigil's settings) reaches the check.
                "--export=NONE",
                f"--comment={check_comment(t)}",
                f"--nodes={len(hosts)}",
                f"--nodelist={','.join(hosts)}",
                "--exclusive",
                f"--time={minutes}",
                f"--job-name=vigil-healthcheck-{t.action_id}",
                f"--output={healthcheck_output(t)}",
                *placed,
                script,
                *shlex.split(settings.VIGIL_HEALTHCHECK_ARGS),
            ],
        ]

    def timeout_s(self, target: Target) -> float:
        if target.kind == "reset_gpu":
            # The wait for the node's jobs to leave, then the reset job's own.
            return 2 * settings.VIGIL_HEALTHCHECK_TIMEOUT_S + 3 * settings.VIGIL_SCHEDULER_TIMEOUT_S
        if target.kind == "health_check":
            # The check's own wait (queued and running), its submission and its cancel.
            return settings.VIGIL_HEALTHCHECK_TIMEOUT_S + 3 * settings.VIGIL_SCHEDULER_TIMEOUT_S
        return super().timeout_s(target)

    def _check_run(self, argv: list[str], target: Target) -> CommandResult:
        """Submit the health check, then follow its job id until it ends. A check that has
        not ended within VIGIL_HEALTHCHECK_TIMEOUT_S (queued or running) is cancelled, so a
        retry never runs beside it. The result reads as `sbatch --wait`'s would: the job id,
        and exit status 0 only if the job completed."""
        submitted = command_run(argv)
        if not submitted.ok:
            return submitted
        job = submitted.stdout.strip().split(";")[0]
        if not SLURM_ID.fullmatch(job):
            return CommandResult(tuple(argv), 1, submitted.stdout, f"sbatch answered {job!r}")
        state = self._await(job)
        if state in FINISHED:
            code = 0 if state == "COMPLETED" else 1
            return CommandResult(tuple(argv), code, f"{job}\n", "" if code == 0 else state)
        return CommandResult(
            tuple(argv),
            124,
            f"{job}\n",
            f"health check job {job} still {state or 'unknown'} after "
            f"{settings.VIGIL_HEALTHCHECK_TIMEOUT_S} s: cancelled",
        )

    def _await(self, job: str) -> str:
        """The job's final state, or (cancelled) its last one when the check's time is up."""
        deadline = time.monotonic() + settings.VIGIL_HEALTHCHECK_TIMEOUT_S
        state = ""
        while True:
            state = self._state(job) or self._accounted_state(job)
            if state in FINISHED:
                return state
            if time.monotonic() > deadline:
                command_run([self.tool("scancel"), "--", job])
                return state
            time.sleep(CHECK_POLL_S)

    def _state(self, job: str) -> str:
        """The job's state from squeue ("" once it has forgotten the job). `%T` alone: the
        output holds nothing the job's owner wrote, and squeue lists this one job only."""
        argv = [self.tool("squeue"), "-h", "--states=all", f"--jobs={job}", "-o", "%T"]
        result = command_run(argv)
        return result.stdout.strip() if result.ok else ""

    def _accounted_state(self, job: str) -> str:
        """The state of the job's last run in accounting (once squeue has forgotten it)."""
        runs = self._runs(job)
        return runs[-1] if runs else ""

    def _runs(self, job: str) -> list[str]:
        """The states of each run of the job (a requeue adds one) in accounting: slurmdbd's,
        or the job completion records (`-c`) where there is no slurmdbd. Read by JobID:
        `sacct -P` without the job's name, which could hold the separator."""
        argv = [self.tool("sacct"), "-D", "-X", "-P", "-n", "-o", "JobID,State", "-j", job]
        result = command_run(argv)
        if not result.ok:
            result = command_run([argv[0], "-c", *argv[1:]])
        if not result.ok:
            return []
        rows = [line.split("|") for line in result.stdout.splitlines()]
        return [row[1].split()[0] for row in rows if len(row) == 2 and row[0] == job and row[1]]

    def _check_done(self, target: Target) -> bool:
        """After a crash: whether the check was submitted; then it is followed to its end
        (cancelled if its time is up, then submitted again)."""
        comment = check_comment(target)
        result = command_run([self.tool("squeue"), "--json", "--states=all"])
        mine = squeue_jobs_with_comment(result.stdout, comment, os.getuid()) if result.ok else []
        for job in mine:
            if self._await(job) not in FINISHED:
                return False
        if mine:
            return True
        try:
            return "VIGIL-HEALTH" in _read_private(healthcheck_output(target))
        except OSError:
            return False

    def run(self, argv: Sequence[str], target: Target) -> CommandResult:
        if target.kind in RESTARTS and "StartTime=now" in argv:
            self._wait_requeued(target.job)
        if target.kind in ("health_check", "reset_gpu"):
            try:
                private_dir(healthcheck_output(target).parent)
            except OSError as exc:
                return CommandResult(tuple(argv), 1, "", f"recovery work folder: {exc}")
        argv = list(argv)
        # The recorded command names the tool as an operator types it; the recovery worker's
        # host decides where it lives.
        argv = [self.tool(argv[0]), *argv[1:]]
        if target.kind in ("health_check", "reset_gpu") and "--parsable" in argv:
            result = self._check_run(argv, target)
            if target.kind == "reset_gpu" and not result.ok:
                return self._reset_failed(target, result)
            return result
        if target.kind == "reset_gpu" and argv[0].endswith("squeue"):
            return self._await_idle(argv)
        return super().run(argv, target)

    def _await_idle(self, argv: list[str]) -> CommandResult:
        """Ask (the recorded squeue) until no job holds the node: the requeued jobs leave in
        seconds, another user's job when it ends. Past VIGIL_HEALTHCHECK_TIMEOUT_S, a timeout
        (the action comes back later)."""
        deadline = time.monotonic() + settings.VIGIL_HEALTHCHECK_TIMEOUT_S
        while True:
            result = command_run(argv)
            if result.ok and not result.stdout.split():
                return CommandResult(tuple(argv), 0, "no job holds the node\n")
            if time.monotonic() > deadline:
                jobs = " ".join(result.stdout.split()[:20]) or result.stderr.strip()[:200]
                return CommandResult(
                    tuple(argv), 124, result.stdout, f"jobs still hold the node: {jobs}"
                )
            time.sleep(CHECK_POLL_S)

    def _reset_failed(self, target: Target, result: CommandResult) -> CommandResult:
        """A reset that did not complete leaves the node drained again (out of its
        reservation), never to the reservation's end; what nvidia-smi said is kept."""
        try:
            said = _read_private(healthcheck_output(target)).strip()[-1000:]
        except OSError:
            said = ""
        host = node_name(target.host)
        reason = f"vigil: GPU reset failed (action {target.action_id})"
        drained = command_run(
            [self.tool("scontrol"), "update", f"NodeName={host}", "State=DRAIN", f"Reason={reason}"]
        )
        name = reservation_name(target.params.get("reservation", ""))
        command_run([self.tool("scontrol"), "delete", f"ReservationName={name}"])
        note = "node drained again" if drained.ok else f"drain again failed: {drained.stderr}"
        detail = f"{result.stderr or 'reset failed'}: {said or 'no output'} ({note})"
        return CommandResult(result.argv, result.returncode or 1, result.stdout, detail)

    def before(self, argv: Sequence[str], target: Target) -> dict:
        if target.kind in RESTARTS:
            info = self._job(target.job)
            facts = {"restarts": info.get("Restarts"), "job_state": info.get("JobState")}
            if "requeue" in argv:
                facts["runs"] = len(self._runs(target.job))
            return facts
        return {}

    def done(self, argv: Sequence[str], target: Target, before: dict) -> bool:
        if target.kind == "drain":
            return self._node_reason(target.host) == drain_reason(target)
        if target.kind == "resume":
            state = self._node(target.host, "%T")
            return bool(state) and "drain" not in state
        if target.kind in RESTARTS and "StartTime=now" in argv:
            return False  # idempotent: run it again
        if target.kind in RESTARTS:
            now, then = self._job(target.job).get("Restarts"), before.get("restarts")
            if now and then:
                return int(now) > int(then)
            # squeue has forgotten the job (it ran and ended since): accounting has a record
            # of each run, the requeue's included.
            return before.get("runs") is not None and len(self._runs(target.job)) > before["runs"]
        if target.kind in ("health_check", "reset_gpu") and argv[0] == "sbatch":
            return self._check_done(target)
        if target.kind == "reset_gpu" and argv[:3] == ["scontrol", "create", "reservation"]:
            name = target.params.get("reservation", "")
            out = command_run([self.tool("scontrol"), "show", f"ReservationName={name}"])
            return out.ok and f"ReservationName={name} " in out.stdout
        if target.kind == "reset_gpu" and "State=RESUME" in argv:
            state = self._node(target.host, "%T")
            return bool(state) and "drain" not in state
        if target.kind == "reboot":
            out = command_run([self.tool("scontrol"), "show", "node", target.host]).stdout
            return "REBOOT_REQUESTED" in out or "REBOOT_ISSUED" in out
        return False

    def transient(self, result: CommandResult) -> bool:
        return result.returncode == 124 or bool(TRANSIENT.search(result.stderr + result.stdout))

    def followups(self, target: Target, results: Sequence[CommandResult]) -> dict:
        if target.kind != "health_check":
            return {}
        try:
            text = _read_private(healthcheck_output(target))
        except OSError:
            text = ""
        hosts = list(target.params.get("hosts", []))
        verdicts = healthcheck_verdicts(text, hosts)
        return {
            "failed": sorted(h for h, (ok, _) in verdicts.items() if not ok),
            "verdicts": {h: {"passed": ok, "detail": d} for h, (ok, d) in verdicts.items()},
        }

    def _node(self, host: str, fmt: str) -> str:
        return command_run([self.tool("sinfo"), "-h", "-n", host, "-o", fmt]).stdout.strip()

    def _node_reason(self, host: str) -> str:
        return self._node(host, "%E")

    def _wait_requeued(self, job: str, timeout_s: float = 10.0) -> None:
        """A requeued job passes through COMPLETING / REQUEUED before it is PENDING again, and
        only a pending job can be made eligible; wait (briefly) for that."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._state(job) in ("PENDING", "RUNNING", ""):
                return
            time.sleep(0.05)

    def _job(self, job: str) -> dict[str, str]:
        """The job's `JobState` and `Restarts`, as Slurm has them ({} when it has none)."""
        argv = [self.tool("squeue"), "--json", "--states=all", f"--jobs={job}"]
        result = command_run(argv)
        return squeue_job(result.stdout, job) if result.ok else {}
