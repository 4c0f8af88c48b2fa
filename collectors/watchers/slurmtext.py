"""Slurm's text: parsing what `squeue`, `sinfo` and `scontrol` print, and running the client
tools (collectors/watchers/slurm.py is the watcher that polls them).

Plain functions over text, tested on output recorded from Debian 12's slurm-wlm 22.05
(tests/collectors/test_slurm_watcher.py). Times are epoch seconds because `run_command` sets
`SLURM_TIME_FORMAT=%s`.

A job's owner writes some of what these tools print: its name, comment, account, working
directory and output paths may hold any character, newlines and Slurm's own `Key=` words
included (Slurm 22.05 keeps them as given). So scheduler fields are read from `squeue -O` and
`sinfo -O` with a separator drawn at random for each call (`field_separator`), which no job
written before the call can hold: a field then ends where the separator says, whatever it
holds. `scontrol`'s `Key=value` text has no such separator; what is read from it keeps only
keys printed once (`parse_key_values`), since a job name can add a `UserId=` but never remove
the real one. The jobcomp file is not read: a name holding a newline writes whole records in
it that nothing tells from the real ones.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from collectors.schema import JobGpus

log = logging.getLogger("vigil.collector.slurm")

Runner = Callable[[list[str]], str]
"""Runs a Slurm client command (argv) and returns its stdout; raises SlurmError on failure."""

COMMAND_TIMEOUT_S = 30.0
# Forget a job that vanished from squeue without an end record after this long (purged while
# the watcher was down): its end is not coming.
FORGET_AFTER_S = 7 * 86400.0
SEP = "\x1f"  # ASCII unit separator; begins and ends every field_separator()

# squeue -O fields, in the order the parser reads them. exit_code is the wait status (exit
# status << 8, or the signal), as waitpid(2) gives it.
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
    "exit_code",
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


def field_separator() -> str:
    """A separator for the fields of one `-O` listing: drawn at random for each call, so no job
    name, comment or path written before it can hold it (a fixed one could be typed in)."""
    return f"{SEP}{secrets.token_hex(8)}{SEP}"


def fields_format(fields: Sequence[str], sep: str) -> str:
    """The `-O` argument listing `fields`, each ended by `sep` (no width: nothing is cut)."""
    return ",".join(f"{f}:{sep}" for f in fields)


def split_fields(text: str, sep: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Rows of an `-O fields_format(fields, sep)` listing, split on `sep` alone: a field may
    hold newlines. Values keep their inner text, outer blanks stripped."""
    tokens = text.split(sep)
    tail = tokens.pop()  # after the last field of the last row: the line end
    n = len(fields)
    if tail.strip() or len(tokens) % n:
        # Cannot come from the tool with this separator; read nothing rather than guess.
        log.warning("%s listing: %d fields do not make rows of %d", fields[0], len(tokens), n)
        return []
    return [
        dict(zip(fields, (t.strip() for t in tokens[i : i + n]), strict=True))
        for i in range(0, len(tokens), n)
    ]


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


def exit_status(value: str | None) -> int | None:
    """squeue's `exit_code`, a wait status: `768` -> 3 (exit 3); `9` (killed by signal 9) -> -9,
    as subprocess reports it."""
    value = slurm_null(value)
    if not value.isdigit():
        return None
    status = int(value)
    if status & 0x7F:
        return -(status & 0x7F)
    return (status >> 8) & 0xFF


def parse_key_values(text: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces ...` (scontrol style) as a dict, without the keys
    printed more than once.

    A key is a capitalised word followed by `=` at the start or after a space, so a value may
    hold spaces. A job name or comment can hold ` UserId=root(0)` or a newline and
    `StdOut=/etc/shadow`; Slurm still prints the real key, so a key seen twice is one a job
    wrote, and neither value is believed.
    """
    out: dict[str, str] = {}
    twice: set[str] = set()
    matches = list(re.finditer(r"(?:^|(?<=\s))([A-Z][A-Za-z_/:]*)=", text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        key = m.group(1)
        if key in out:
            twice.add(key)
        out[key] = text[m.end() : end].strip()
    for key in twice:
        del out[key]
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


def squeue_args(sep: str = SEP) -> list[str]:
    """Every job slurmctld holds, SQUEUE_FIELDS each ended by `sep` (a field_separator())."""
    return [
        "squeue",
        "--all",
        "--noheader",
        "--states=all",
        "-O",
        fields_format(SQUEUE_FIELDS, sep),
    ]


def parse_squeue(text: str, sep: str = SEP) -> list[SlurmJob]:
    """Rows of `squeue_args(sep)` output."""
    jobs = []
    for f in split_fields(text, sep, SQUEUE_FIELDS):
        if not f["JobID"].isdigit():
            log.warning("squeue: skipping a row with job id %r", f["JobID"][:40])
            continue
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
                exit_code=exit_status(f["exit_code"]),
            )
        )
    return jobs


def parse_scontrol_job(text: str) -> SlurmJob:
    """`scontrol show job -d <id>`: state, times, exit code and the GPUs held on each node.

    Keys printed more than once are not believed (parse_key_values), nor the GPUs of a node
    named by more than one `Nodes= ... GRES=` line: a job name holding a newline can add a
    line, never take the real one away.
    """
    rest: list[str] = []
    per_host: dict[str, list[int]] = {}
    twice: set[str] = set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Nodes=") and "GRES=" in stripped:
            kv = parse_key_values(stripped)
            indices = gres_gpu_indices(kv.get("GRES", ""))
            for host in expand_hostlist(kv.get("Nodes", "")):
                if host in per_host:
                    twice.add(host)
                per_host[host] = indices
            continue
        rest.append(stripped)
    allocation = [JobGpus(node=h, gpu_indices=i) for h, i in per_host.items() if h not in twice]
    fields = parse_key_values("\n".join(rest))
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


def sinfo_args(sep: str = SEP) -> list[str]:
    """One row per node (`-N`), every partition (`--all`), fields ended by `sep` (a reason may
    hold `|`, spaces or a newline; with no width given sinfo does not cut a field)."""
    return ["sinfo", "--all", "--Node", "--noheader", "-O", fields_format(SINFO_FIELDS, sep)]


def parse_sinfo(text: str, sep: str = SEP) -> list[SlurmNode]:
    """Rows of `sinfo_args(sep)` output, one per node (a node of several partitions is listed
    once per partition by sinfo, here once)."""
    nodes: dict[str, SlurmNode] = {}
    for f in split_fields(text, sep, SINFO_FIELDS):
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
