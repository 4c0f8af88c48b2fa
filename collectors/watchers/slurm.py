"""Slurm watcher: job events from `squeue`, `scontrol show job -d` and the jobcomp file.

Runs on one host per cluster where the Slurm client tools work (the controller or a login
node), polled by the agent loop. Each poll:

1. reads the records appended to the job completion file since the last poll
   (`JobCompType=jobcomp/filetxt`; its path comes from `scontrol show config`): the final
   state and exit code of every job, even one that started and ended between two polls, and a
   record with state PENDING for each run that was requeued;
2. lists every job `squeue` knows (`-t all`, explicit `-O` fields, epoch times through
   `SLURM_TIME_FORMAT=%s`; Slurm 22.05 has no usable `--json` here);
3. asks `scontrol show job -d <id>` once per run that started, for the GPU indices the job holds
   on each node (`GRES=gpu:2(IDX:0-1)`), and once per job that ended without a jobcomp record,
   for its exit code.

The changes become `JobEventIn` events (submitted, started with its allocation, requeued,
ended) sent as one `JobEventBatch` per poll. What was reported is kept in a small JSON state
file, so a restarted watcher neither loses events nor repeats them (a repeat would be harmless:
the server keeps one event per job, kind and time).

Times: squeue and scontrol print epoch seconds because we set `SLURM_TIME_FORMAT=%s`; the
jobcomp file is written by slurmctld in its own format (ISO local time by default), parsed
here in this host's time zone, so the watcher host must share the controller's time zone.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from collectors.schema import (
    SCHEMA_VERSION,
    JobEventBatch,
    JobEventIn,
    JobGpus,
    new_batch_id,
)

log = logging.getLogger("vigil.collector.slurm")

Runner = Callable[[list[str]], str]
"""Runs a Slurm client command (argv) and returns its stdout; raises SlurmError on failure."""

COMMAND_TIMEOUT_S = 30.0
# Forget a job that vanished from squeue without an end record after this long (jobcomp off
# and the job purged while the watcher was down): its end is not coming.
FORGET_AFTER_S = 7 * 86400.0
SEP = "\x1f"  # ASCII unit separator: Slurm strips control characters from names and comments

# squeue -O fields, in the order the parser reads them.
SQUEUE_FIELDS = (
    "JobID",
    "State",
    "Name",
    "UserName",
    "Partition",
    "QOS",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "tres-per-node",
    "tres-per-job",
    "NumNodes",
    "NodeList",
    "Comment",
)

# Slurm job states (squeue(1) "JOB STATE CODES") grouped by what they mean for Vigil.
STARTED_STATES = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}
)
WAITING_STATES = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "RESIZING"}
)
# Final states that schema.JOB_END_STATES does not name, mapped to the closest one.
END_STATE_ALIASES = {
    "BOOT_FAIL": "NODE_FAIL",
    "DEADLINE": "TIMEOUT",
    "SPECIAL_EXIT": "FAILED",
    "REVOKED": "CANCELLED",
}
END_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}
    | set(END_STATE_ALIASES)
)


class SlurmError(RuntimeError):
    """A Slurm command failed or could not run."""


# --- Parsing (plain functions over the text the tools print) ------------------------------


def slurm_null(value: str | None) -> str:
    """Slurm's spellings of "no value" as an empty string."""
    value = (value or "").strip()
    return "" if value in ("(null)", "N/A", "None", "NONE", "Unknown", "n/a") else value


def parse_time(value: str | None) -> float | None:
    """Epoch seconds from `1700000000` (SLURM_TIME_FORMAT=%s) or `2023-11-14T22:13:20` (local)."""
    value = slurm_null(value)
    if not value:
        return None
    if value.isdigit():
        ts = float(value)
        return ts if ts > 0 else None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def parse_index_list(text: str) -> list[int]:
    """`0-1,4,6-7` -> [0, 1, 4, 6, 7]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad index range {part!r}")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(out))


def gres_gpu_indices(gres: str) -> list[int]:
    """GPU indices in a `GRES=` value: `gpu:2(IDX:0-1)`, `gpu(IDX:0,2)`,
    `gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:4)`; other GRES (shard, mps, nic) are ignored."""
    out: set[int] = set()
    for match in re.finditer(r"(?:^|,)gpu(?::[^,(]*)?\(IDX:([^)]*)\)", gres):
        idx = match.group(1)
        if slurm_null(idx):
            out.update(parse_index_list(idx))
    return sorted(out)


def expand_hostlist(expr: str) -> list[str]:
    """`node[01-03,07],gpu-a` -> node01 node02 node03 node07 gpu-a (zero padding kept)."""
    expr = slurm_null(expr)
    hosts: list[str] = []
    # Split on commas outside brackets.
    depth, start = 0, 0
    parts = []
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    for part in parts:
        if part:
            hosts.extend(_expand_one(part))
    return hosts


def _expand_one(part: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", part)
    if not match:
        return [part]
    head, tail = part[: match.start()], part[match.end() :]
    out = []
    for rng in match.group(1).split(","):
        lo, _, hi = rng.partition("-")
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
    return out


def tres_gpus(tres: str) -> int | None:
    """GPU count in a TRES string: `gres:gpu:2`, `gres/gpu=4`, `gres:gpu:a100:2`, `gpu:8`."""
    total = None
    for item in slurm_null(tres).split(","):
        item = item.strip()
        m = re.fullmatch(r"(?:gres[:/])?gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)", item)
        if m:
            total = (total or 0) + int(m.group(1))
    return total


def parse_exit_code(value: str | None) -> int | None:
    """`1:0` -> 1 (the exit status); `0:9` (killed by signal 9) -> -9, as subprocess reports it."""
    value = slurm_null(value)
    if not value:
        return None
    code, _, signal = value.partition(":")
    try:
        code_i, sig_i = int(code), int(signal or 0)
    except ValueError:
        return None
    if code_i == 0 and sig_i:
        return -min(sig_i, 255)
    return max(-255, min(code_i, 255))


def end_state(state: str) -> str | None:
    """The schema's final state for a Slurm state (`CANCELLED by 0` -> CANCELLED), else None."""
    word = state.strip().split(" ")[0].upper().rstrip("+")
    if word not in END_STATES:
        return None
    return END_STATE_ALIASES.get(word, word)


def user_name(value: str) -> str:
    """`root(0)` -> root."""
    return slurm_null(value).split("(", 1)[0]


def parse_key_values(text: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces ...` (jobcomp and scontrol style) as a dict.

    A key is a capitalised word followed by `=` at the start or after a space, so a value may
    hold spaces (job names, comments).
    """
    out: dict[str, str] = {}
    matches = list(re.finditer(r"(?:^|(?<=\s))([A-Z][A-Za-z_/:]*)=", text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out.setdefault(m.group(1), text[m.end() : end].strip())
    return out


@dataclass
class SlurmJob:
    """What one source says about a job; empty strings and None where it says nothing."""

    job_id: str
    state: str
    name: str = ""
    user: str = ""
    partition: str = ""
    qos: str = ""
    comment: str = ""
    submit_ts: float | None = None
    start_ts: float | None = None
    end_ts: float | None = None
    nodes: int | None = None
    gpus: int | None = None
    node_list: list[str] = field(default_factory=list)
    exit_code: int | None = None
    allocation: list[JobGpus] = field(default_factory=list)


def squeue_args() -> list[str]:
    fmt = ",".join(f"{f}:{SEP}" for f in SQUEUE_FIELDS)
    return ["squeue", "--all", "--noheader", "--states=all", "-O", fmt]


def parse_squeue(text: str) -> list[SlurmJob]:
    """Rows of `squeue_args()` output (fields ended by SEP, in SQUEUE_FIELDS order)."""
    jobs = []
    n = len(SQUEUE_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(SEP)]
        if len(cols) < n:
            log.warning("squeue: skipping a line with %d of %d fields: %r", len(cols), n, line)
            continue
        f = dict(zip(SQUEUE_FIELDS, cols[:n], strict=True))
        nodes = int(f["NumNodes"]) if f["NumNodes"].isdigit() else None
        per_node = tres_gpus(f["tres-per-node"])
        gpus = tres_gpus(f["tres-per-job"])
        if gpus is None and per_node is not None:
            gpus = per_node * (nodes or 1)
        jobs.append(
            SlurmJob(
                job_id=f["JobID"],
                state=f["State"].upper(),
                name=slurm_null(f["Name"]),
                user=slurm_null(f["UserName"]),
                partition=slurm_null(f["Partition"]),
                qos=slurm_null(f["QOS"]),
                comment=slurm_null(f["Comment"]),
                submit_ts=parse_time(f["SubmitTime"]),
                start_ts=parse_time(f["StartTime"]),
                end_ts=parse_time(f["EndTime"]),
                nodes=nodes,
                gpus=gpus,
                node_list=expand_hostlist(f["NodeList"]),
            )
        )
    return jobs


def parse_scontrol_job(text: str) -> SlurmJob:
    """`scontrol show job -d <id>`: state, times, exit code and the GPUs held on each node."""
    fields: dict[str, str] = {}
    allocation: list[JobGpus] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Nodes=") and "GRES=" in stripped:
            kv = parse_key_values(stripped)
            indices = gres_gpu_indices(kv.get("GRES", ""))
            for host in expand_hostlist(kv.get("Nodes", "")):
                allocation.append(JobGpus(node=host, gpu_indices=indices))
            continue
        for key, value in parse_key_values(stripped).items():
            fields.setdefault(key, value)
    if "JobId" not in fields:
        raise SlurmError("scontrol show job: no JobId in the output")
    nodes = fields.get("NumNodes", "").split("-")[0]
    gpus = tres_gpus(fields.get("TresPerJob", ""))
    if gpus is None and tres_gpus(fields.get("TresPerNode", "")) is not None:
        gpus = tres_gpus(fields["TresPerNode"]) * (int(nodes) if nodes.isdigit() else 1)  # type: ignore[operator]
    held = sum(len(a.gpu_indices) for a in allocation)
    return SlurmJob(
        job_id=fields["JobId"],
        state=fields.get("JobState", "").upper(),
        name=slurm_null(fields.get("JobName")),
        user=user_name(fields.get("UserId", "")),
        partition=slurm_null(fields.get("Partition")),
        qos=slurm_null(fields.get("QOS")),
        comment=slurm_null(fields.get("Comment")),
        submit_ts=parse_time(fields.get("SubmitTime")),
        start_ts=parse_time(fields.get("StartTime")),
        end_ts=parse_time(fields.get("EndTime")),
        nodes=int(nodes) if nodes.isdigit() else None,
        gpus=held or gpus,
        node_list=expand_hostlist(fields.get("NodeList", "")),
        exit_code=parse_exit_code(fields.get("ExitCode")),
        allocation=allocation,
    )


def parse_jobcomp_line(line: str) -> SlurmJob | None:
    """One jobcomp/filetxt record (`JobId=.. UserId=.. JobState=.. ExitCode=..`), else None."""
    kv = parse_key_values(line.strip())
    if "JobId" not in kv or "JobState" not in kv:
        return None
    node_count = kv.get("NodeCnt", "")
    return SlurmJob(
        job_id=kv["JobId"],
        state=kv["JobState"].upper(),
        name=slurm_null(kv.get("Name")),
        user=user_name(kv.get("UserId", "")),
        partition=slurm_null(kv.get("Partition")),
        qos=slurm_null(kv.get("QOS")),
        submit_ts=parse_time(kv.get("SubmitTime")),
        start_ts=parse_time(kv.get("StartTime")),
        end_ts=parse_time(kv.get("EndTime")),
        nodes=int(node_count) if node_count.isdigit() else None,
        gpus=tres_gpus(kv.get("Tres", "")),
        node_list=expand_hostlist(kv.get("NodeList", "")),
        exit_code=parse_exit_code(kv.get("ExitCode")),
    )


def parse_jobcomp_config(text: str) -> Path | None:
    """The jobcomp file from `scontrol show config`, when JobCompType is jobcomp/filetxt."""
    conf = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            conf[key.strip()] = value.strip()
    if conf.get("JobCompType") != "jobcomp/filetxt" or not slurm_null(conf.get("JobCompLoc")):
        return None
    return Path(conf["JobCompLoc"])


def run_command(args: list[str]) -> str:
    """Run a Slurm client tool with epoch times; its stdout, or SlurmError."""
    env = {**os.environ, "SLURM_TIME_FORMAT": "%s"}
    try:
        proc = subprocess.run(
            args, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{args[0]}: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmError(f"{' '.join(args[:3])}: exit {proc.returncode}: {detail[-1:] or ''}")
    return proc.stdout


# --- The watcher ---------------------------------------------------------------------------


@dataclass
class _Known:
    """What the watcher reported about one job (persisted in the state file)."""

    info: dict[str, Any] = field(default_factory=dict)
    sent: list[list[Any]] = field(default_factory=list)  # [kind, ts] pairs already reported
    run_start: float | None = None  # start of the run reported as started, not yet over
    ended: bool = False
    last_seen: float = 0.0

    def has(self, kind: str, ts: float | None) -> bool:
        return [kind, ts] in self.sent


class SlurmWatcher:
    """Polls Slurm and returns one JobEventBatch (JSON text) per poll with changes."""

    source = "slurm"

    def __init__(
        self,
        cluster: str,
        node: str,
        token: str,
        *,
        state_path: Path | None = None,
        jobcomp_path: Path | None = None,
        detect_jobcomp: bool = True,
        interval_s: float = 0.0,
        runner: Runner = run_command,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.token = token
        self.state_path = state_path
        self.jobcomp_path = jobcomp_path
        self._detect_jobcomp = detect_jobcomp and jobcomp_path is None
        self.interval_s = interval_s
        self.run = runner
        self.jobs: dict[str, _Known] = {}
        self._jobcomp_pos: dict[str, Any] = {}
        self._last_poll: float | None = None
        self.events_sent = 0
        self._load_state()

    # State file -------------------------------------------------------------------------

    def _load_state(self) -> None:
        if self.state_path is None or not self.state_path.exists():
            return
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            self.jobs = {k: _Known(**v) for k, v in data.get("jobs", {}).items()}
            self._jobcomp_pos = dict(data.get("jobcomp", {}))
        except (OSError, ValueError, TypeError) as exc:
            log.warning("state file %s unreadable (%s); starting afresh", self.state_path, exc)
            self.jobs, self._jobcomp_pos = {}, {}

    def _save_state(self) -> None:
        if self.state_path is None:
            return
        data = {
            "jobcomp": self._jobcomp_pos,
            "jobs": {k: v.__dict__ for k, v in self.jobs.items()},
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(f".{self.state_path.name}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, self.state_path)

    # Polling ----------------------------------------------------------------------------

    def poll(self, ts: float | None = None) -> list[tuple[str, str]]:
        """One look at Slurm; [(batch_id, JobEventBatch JSON)] with the new events, or []."""
        now = time.time() if ts is None else ts
        if self._last_poll is not None and now - self._last_poll < self.interval_s:
            return []
        self._last_poll = now
        events = self.collect(now)
        if not events:
            return []
        batch = JobEventBatch(
            v=SCHEMA_VERSION,
            batch_id=new_batch_id(),
            cluster=self.cluster,
            node=self.node,
            token=self.token,
            sent_at=time.time(),
            source="slurm",
            events=events,
        )
        self.events_sent += len(events)
        return [(str(batch.batch_id), batch.model_dump_json(exclude_none=True))]

    def commit(self) -> None:
        """Persist what was reported (call after the batch went to the transport or spool)."""
        self._save_state()

    def collect(self, now: float) -> list[JobEventIn]:
        """The new events since the last call (state updated in memory only)."""
        if self._detect_jobcomp:
            try:
                self.jobcomp_path = parse_jobcomp_config(self.run(["scontrol", "show", "config"]))
                self._detect_jobcomp = False
                if self.jobcomp_path is None:
                    log.info("JobCompType is not jobcomp/filetxt: final states from squeue only")
            except SlurmError as exc:
                log.warning("scontrol show config: %s", exc)
        try:
            squeue = parse_squeue(self.run(squeue_args()))
        except SlurmError as exc:
            log.warning("squeue failed, skipping this poll: %s", exc)
            return []
        out: list[JobEventIn] = []
        for record in self._read_jobcomp():
            out.extend(self._from_jobcomp(record))
        present = set()
        for job in squeue:
            present.add(job.job_id)
            out.extend(self._from_squeue(job, now))
        self._forget(present, now)
        out.sort(key=lambda e: (e.ts, ("submitted", "started", "requeued", "ended").index(e.kind)))
        return out

    def _read_jobcomp(self) -> list[SlurmJob]:
        path = self.jobcomp_path
        if path is None:
            return []
        try:
            st = path.stat()
        except FileNotFoundError:
            return []
        pos = self._jobcomp_pos
        if pos.get("path") != str(path) or pos.get("inode") != st.st_ino:
            # First look at this file: start at its end (history before the watcher ran is
            # not replayed), unless it is new (rotated) and everything in it is news.
            fresh = pos.get("path") == str(path)
            pos.update(path=str(path), inode=st.st_ino, offset=0 if fresh else st.st_size)
        if st.st_size < pos["offset"]:  # truncated in place
            pos["offset"] = 0
        with open(path, "rb") as fh:
            fh.seek(pos["offset"])
            data = fh.read()
        complete = data.rfind(b"\n") + 1  # a half-written last line waits for the next poll
        pos["offset"] += complete
        records = []
        for raw in data[:complete].decode("utf-8", errors="replace").splitlines():
            record = parse_jobcomp_line(raw)
            if record is not None:
                records.append(record)
        return records

    def _known(self, job: SlurmJob, now: float) -> _Known:
        known = self.jobs.setdefault(job.job_id, _Known())
        known.last_seen = now
        info = known.info
        for key, limit in (("name", 256), ("user", 128), ("partition", 128), ("qos", 128)):
            value = getattr(job, key)
            if value:
                info[key] = value[:limit]
        if job.comment:
            info["comment"] = job.comment[:1024]
        # Slurm resets SubmitTime on requeue: keep the first one.
        if job.submit_ts is not None and info.get("submit_ts") is None:
            info["submit_ts"] = job.submit_ts
        if job.gpus is not None:
            info["gpus_requested"] = job.gpus
        if job.nodes:
            info["nodes_requested"] = job.nodes
        return known

    def _event(
        self, job_id: str, known: _Known, kind: str, ts: float, *, key: Any = "ts", **extra: Any
    ) -> JobEventIn:
        info = dict(known.info)
        submit = info.get("submit_ts")
        start = extra.get("start_ts")
        if submit is not None and start is not None and submit > start:
            info["submit_ts"] = start
        known.sent.append([kind, ts if key == "ts" else key])
        return JobEventIn(job_id=job_id, kind=kind, ts=ts, **info, **extra)  # type: ignore[arg-type]

    def _submitted(self, job: SlurmJob, known: _Known, now: float) -> list[JobEventIn]:
        # One per job whatever its submit time says (Slurm moves it on requeue).
        if known.has("submitted", None):
            return []
        ts = known.info.get("submit_ts") or now
        return [self._event(job.job_id, known, "submitted", ts, key=None)]

    def _started(self, job: SlurmJob, known: _Known, allocation: list[JobGpus]) -> list[JobEventIn]:
        start = job.start_ts
        if start is None or known.has("started", start):
            return []
        known.run_start = start
        return [
            self._event(job.job_id, known, "started", start, start_ts=start, allocation=allocation)
        ]

    def _requeued(self, job_id: str, known: _Known, ts: float) -> list[JobEventIn]:
        known.run_start = None
        if known.has("requeued", ts):
            return []
        return [self._event(job_id, known, "requeued", ts)]

    def _ended(self, job: SlurmJob, known: _Known, state: str) -> list[JobEventIn]:
        end = job.end_ts or job.start_ts or time.time()
        known.run_start = None
        known.ended = True
        if known.has("ended", end):
            return []
        started = bool(job.node_list) and job.start_ts is not None
        return [
            self._event(
                job.job_id,
                known,
                "ended",
                end,
                state=state,
                exit_code=job.exit_code,
                start_ts=job.start_ts if started else None,
                end_ts=end,
            )
        ]

    def _allocation_of(self, job: SlurmJob) -> list[JobGpus]:
        """GPUs per node from scontrol; the node list with no indices if scontrol cannot say."""
        try:
            detail = parse_scontrol_job(self.run(["scontrol", "show", "job", "-d", job.job_id]))
        except SlurmError as exc:
            log.info("scontrol show job %s: %s", job.job_id, exc)
            detail = None
        if detail is not None and any(a.gpu_indices for a in detail.allocation):
            return detail.allocation
        return [JobGpus(node=n, gpu_indices=[]) for n in job.node_list]

    def _from_jobcomp(self, record: SlurmJob) -> list[JobEventIn]:
        known = self._known(record, time.time())
        out = self._submitted(record, known, record.submit_ts or time.time())
        ran = bool(record.node_list) and record.start_ts is not None
        if ran and known.run_start != record.start_ts:
            # The run started and ended between two polls: we never saw which GPUs it held.
            out += self._started(record, known, [JobGpus(node=n) for n in record.node_list])
        state = end_state(record.state)
        if state is None:  # a PENDING / REQUEUED record: this run was requeued
            out += self._requeued(record.job_id, known, record.end_ts or time.time())
        else:
            out += self._ended(record, known, state)
        return out

    def _from_squeue(self, job: SlurmJob, now: float) -> list[JobEventIn]:
        known = self._known(job, now)
        out = self._submitted(job, known, now)
        state = job.state.split(" ")[0]
        if state in STARTED_STATES and job.start_ts is not None:
            if known.run_start is not None and known.run_start != job.start_ts:
                # Requeued and started again between two polls, with no jobcomp record.
                out += self._requeued(job.job_id, known, job.start_ts)
            if not known.has("started", job.start_ts):
                out += self._started(job, known, self._allocation_of(job))
        elif state in WAITING_STATES:
            if known.run_start is not None and not known.ended:
                out += self._requeued(job.job_id, known, now)
        elif end_state(state) is not None and not known.ended:
            # Ended with no jobcomp record (jobcomp not configured): ask scontrol for the
            # exit code while the job is still in the controller's memory.
            try:
                detail = parse_scontrol_job(self.run(["scontrol", "show", "job", job.job_id]))
                job.exit_code = detail.exit_code
            except SlurmError as exc:
                log.info("scontrol show job %s: %s", job.job_id, exc)
            ran = bool(job.node_list) and job.start_ts is not None
            if ran and not known.has("started", job.start_ts):
                out += self._started(job, known, [JobGpus(node=n) for n in job.node_list])
            out += self._ended(job, known, end_state(state) or "FAILED")
        return out

    def _forget(self, present: Iterable[str], now: float) -> None:
        present = set(present)
        for job_id in list(self.jobs):
            known = self.jobs[job_id]
            if job_id in present:
                continue
            if known.ended or now - known.last_seen > FORGET_AFTER_S:
                del self.jobs[job_id]
