"""Slurm's text: parsing what `squeue`, `sinfo`, `scontrol` and the jobcomp file print, and
running the client tools (collectors/watchers/slurm.py is the watcher that polls them).

Plain functions over text, tested on output recorded from Debian 12's slurm-wlm 22.05
(tests/collectors/test_slurm_watcher.py). Times are epoch seconds because `run_command` sets
`SLURM_TIME_FORMAT=%s`; the jobcomp file is parsed in this host's time zone.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from collectors.schema import JobGpus

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
    "Account",
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
    project: str = ""  # the account (-A)
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
                project=slurm_null(f["Account"]),
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
        project=slurm_null(fields.get("Account")),
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
        project=slurm_null(kv.get("Account")),
        submit_ts=parse_time(kv.get("SubmitTime")),
        start_ts=parse_time(kv.get("StartTime")),
        end_ts=parse_time(kv.get("EndTime")),
        nodes=int(node_count) if node_count.isdigit() else None,
        gpus=tres_gpus(kv.get("Tres", "")),
        node_list=expand_hostlist(kv.get("NodeList", "")),
        exit_code=parse_exit_code(kv.get("ExitCode")),
    )


# --- Nodes: `sinfo` states and reasons ----------------------------------------------------

# sinfo -O fields, in the order the parser reads them. StateComplete (`idle+drain`,
# `allocated+drain`, `down+drain`) keeps every flag; the long form (`%T`) folds DOWN+DRAIN
# into `drained` and so hides that the node is down. Timestamp is when the reason was set,
# epoch seconds with SLURM_TIME_FORMAT=%s, `Unknown` for a node without one.
SINFO_FIELDS = ("NodeList", "StateComplete", "Reason", "Timestamp")

# Vigil's node states (schema.NODE_STATES) from the words of a Slurm node state, long or
# complete form (sinfo(1) "NODE STATE CODES"; the 22.05 names seen on the test cluster are in
# tests/collectors/test_slurm_watcher.py). Abbreviations are those of `%t`.
NODE_DOWN_WORDS = frozenset(
    {"down", "fail", "failing", "not_responding", "error", "err", "inval", "invalid_reg"}
)
NODE_DRAINING_WORDS = frozenset({"draining", "drng"})
NODE_DRAINED_WORDS = frozenset({"drained", "drain"})  # `drain`: a flag in the complete form
# Jobs still on the node: with the DRAIN flag it is draining, not drained yet.
NODE_BUSY_WORDS = frozenset({"allocated", "alloc", "mixed", "mix", "completing", "comp"})
# Says nothing of the node yet: the controller has not heard from it, or it is not built.
NODE_NO_STATE_WORDS = frozenset({"unknown", "unk", "future", "futr"})
# What sinfo appends to a state: `*` not responding, `~` powered off, `#` powering up, `!` and
# `%` powering down, `$` maintenance reservation, `@` reboot pending, `^` reboot issued, `-`
# planned by the backfill scheduler.
NODE_STATE_SUFFIXES = "*~#!%$@^-"


def node_state_of(slurm_state: str) -> str | None:
    """Vigil's node state (up, draining, drained, down) for a Slurm node state, or None when
    Slurm does not know it yet (`unknown`, `future`).

    Down wins over drain (`down+drain` is down: the node is not there, drained or not), and
    not responding (`idle*`, `+not_responding`) is down whatever else is said. Every other
    state (idle, mixed, allocated, completing, planned, reserved, powered down) is up: the
    node takes jobs.
    """
    text = slurm_state.strip().lower()
    if not text:
        return None
    words = {w.strip().rstrip(NODE_STATE_SUFFIXES) for w in text.split("+")} - {""}
    if "*" in text or words & NODE_DOWN_WORDS:
        return "down"
    if words & NODE_DRAINING_WORDS:
        return "draining"
    if words & NODE_DRAINED_WORDS:
        return "draining" if words & NODE_BUSY_WORDS else "drained"
    if not words or words & NODE_NO_STATE_WORDS:
        return None
    return "up"


@dataclass
class SlurmNode:
    """One node as `sinfo` shows it."""

    name: str
    slurm_state: str  # as Slurm prints it (StateComplete), e.g. `allocated+drain`
    reason: str = ""  # "" when the node has none
    reason_ts: float | None = None  # when the reason was set


def sinfo_args() -> list[str]:
    """One line per node (`-N`), every partition (`--all`), fields ended by SEP (a reason may
    hold `|` or spaces; with no width given sinfo does not cut a field)."""
    fmt = ",".join(f"{f}:{SEP}" for f in SINFO_FIELDS)
    return ["sinfo", "--all", "--Node", "--noheader", "-O", fmt]


def parse_sinfo(text: str) -> list[SlurmNode]:
    """Rows of `sinfo_args()` output, one per node (a node of several partitions is listed
    once per partition by sinfo, here once)."""
    nodes: dict[str, SlurmNode] = {}
    n = len(SINFO_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(SEP)]
        if len(cols) < n:
            log.warning("sinfo: skipping a line with %d of %d fields: %r", len(cols), n, line)
            continue
        f = dict(zip(SINFO_FIELDS, cols[:n], strict=True))
        for name in expand_hostlist(f["NodeList"]):
            reason = f["Reason"]
            nodes.setdefault(
                name,
                SlurmNode(
                    name=name,
                    slurm_state=f["StateComplete"],
                    # sinfo prints `none` for no reason (lower case: not a slurm_null word).
                    reason="" if reason.lower() == "none" else slurm_null(reason),
                    reason_ts=parse_time(f["Timestamp"]),
                ),
            )
    return list(nodes.values())


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
