"""Error windows from running jobs' stdout/stderr: the lines around an error, not the log.

Which files: `--job-log-glob` patterns (e.g. `/var/log/jobs/*/*.log`, the job id taken from the
first number in a wildcard part of the path), and/or the stdout / stderr paths Slurm gives for
the jobs running on this node (one `squeue -w <node> -O ...` listing, asked once a minute to
spare slurmctld, and at once when a job starts here: `slurmstepd: [<id>.batch]` appears among
the host's processes, a local read that costs slurmctld nothing, so a job that dies in its
first minute is read too). Each file is followed with tail.py (rotation, truncation, restart
from the saved offset).

What is sent: when a line carries an error trigger (a short list of lowercase literals in the
spirit of the anchors of webapp/failures/rules.yaml, kept here because the agent never imports
the server), a window opens with the `BEFORE_LINES` lines before it; every further trigger
line, and every traceback line (frames, code, the exception line), keeps it open; it closes
`AFTER_LINES` ordinary lines after the last such line, when the file stays quiet for
`QUIET_CLOSE_S`, or at `schema.MAX_WINDOW_LINES`. One window per burst: all ranks printing the
same traceback at once is one window. Lines are shipped as written, rank and host prefixes
kept (the diagnosis uses them to blame a rank), each cut at `schema.MAX_LINE_CHARS`.

The agent runs as root and a job log's path is the user's choice, so a log is opened through
no symlink a user made (tail.open_no_follow, O_NOFOLLOW) and checked on the open descriptor,
not the path (nothing can be swapped in between): a regular file, not owned by root or a
system account (uid below `--job-log-min-uid`, 1000 by default: the first uid useradd gives a
person on Debian and Red Hat), and owned by the job's user. The user's uid comes from
`squeue -O UserID`, a number slurmctld prints and no job can shape (a job name can hold
`UserId=root(0)` and a newline; see slurmtext.py), as a `JobLog` with each path. A
`--job-log-glob` file has no known user: it is read when it is a regular file with one name (a
hard link is how a user points a log at a file they cannot read). A refused file is not read
and logs one WARNING naming the job and the reason.
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.schema import MAX_LINE_CHARS, MAX_WINDOW_LINES, LogWindowIn, clean_text
from collectors.watchers.nodeevents import NodeEvents
from collectors.watchers.tail import FileTail, Opener, UnsafeFile, open_no_follow

log = logging.getLogger("vigil.collector.joblogs")

BEFORE_LINES = 20  # context before the first error line (the step, the loss, the rank)
AFTER_LINES = 20  # ordinary lines after the last error line that end a window
QUIET_CLOSE_S = 5.0  # a dying job stops writing: ship the open window after this silence
MAX_WINDOWS_PER_FILE = 50  # a log that errs in a loop is cut off here (volume stays modest)
STARTUP_BACKLOG_S = 300.0  # at start, files quiet longer than this are followed from their end
SLURM_REFRESH_S = 60.0
# Files owned by a uid below this are not read: root and the system accounts (Debian's and Red
# Hat's useradd give people uids from 1000, login.defs UID_MIN).
MIN_UID = 1000
# The host's processes are scanned for new job steps at most this often: at 1 Hz rounds on a
# node with 1,000 processes an every-round scan would cost as much CPU as the rest
# of the agent's goal (1% of a core); a job that dies within 2 s of starting is not an LLM job.
LOCAL_SCAN_S = 2.0
# slurmstepd names itself after the step it runs: "slurmstepd: [1234.batch]", "[1234.0]",
# "[1234.extern]" (Slurm's cgroup v2 page shows the same titles); older releases wrote a bare
# "slurmstepd: [1234]" (seen in public process listings).
SLURMSTEPD_RE = re.compile(rb"^slurmstepd: \[(\d+)[.\]]")

# Lowercase literals; a line containing one opens (or extends) a window. From the kinds of
# line docs/failure-signatures.md lists: Python, CUDA, NCCL, torchrun, kernel OOM, Slurm.
TRIGGERS = (
    "traceback (most recent call last)",
    "error",
    "exception",
    "nccl warn",
    "watchdog",
    "timed out",
    "timeout",
    "killed",
    "segmentation fault",
    "exitcode",
    "cancelled at",
    "out of memory",
    "oom_kill",
    "oom-kill",
    "found nan",
    "loss scale already",
    "by peer",
    "nvrm:",
)
# Prefixes lines carry before the message: [rank3]:, torchrun "[default0]:", srun --label
# "3: ", host:pid:tid, and timestamps (docs/failure-signatures.md: "allowing prefixes").
PREFIX_RE = re.compile(
    r"^(?:\s*(?:\[(?:rank\s*)?\d+\]:?|\[default\d+\]:|\d+:(?=\s)|[\w.-]+:\d+:\d+(?=\s)"
    r"|\[?\d{4}-\d\d-\d\d[ T][\d:.,]+\]?|\[[^\]]{0,40}\]))+\s?",
    re.IGNORECASE,
)
TRACEBACK_RE = re.compile(
    r"^(?:\s+\S|Traceback \(most recent|During handling of|The above exception"
    r"|[\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b|\^+\s*$|~+\^+)"
)
JOB_ID_RE = re.compile(r"\d+(?:_\d+)?")
# squeue -O fields read for the jobs on this node. UserID is numeric and UserName comes from
# the password database; the rest is the job owner's text, safe behind field_separator().
SQUEUE_LOG_FIELDS = (
    "JobID",
    "UserID",
    "UserName",
    "ArrayJobID",
    "ArrayTaskID",
    "BatchHost",
    "WorkDir",
    "STDOUT",
    "STDERR",
    "Name",
)
# sbatch(1) "filename pattern": %A %a %j %J %N %n %s %t %u %x, an optional zero-padding width.
OUTPUT_PATTERN_RE = re.compile(r"%(\d*)([%AajJNnstux])")


@dataclass(frozen=True)
class JobLog:
    """Whose log a file is: the job, and its user's uid (None: not known, a glob's file)."""

    job_id: str
    uid: int | None = None
    user: str = ""


def job_log_refusal(st: os.stat_result, job: JobLog, min_uid: int = MIN_UID) -> str | None:
    """Why the agent must not read the opened file `st` as `job`'s log, else None."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid < min_uid:
        return f"owned by uid {st.st_uid}, a system account (below {min_uid})"
    if job.uid is None:
        if st.st_nlink > 1:
            return f"it has {st.st_nlink} hard links and the job's user is not known"
        return None
    if st.st_uid != job.uid:
        who = f"{job.user} (uid {job.uid})" if job.user else f"uid {job.uid}"
        return f"owned by uid {st.st_uid}, not by the job's user {who}"
    return None


def is_trigger(line: str) -> bool:
    low = line.lower()
    return any(t in low for t in TRIGGERS)


def message_of(line: str) -> str:
    """The line without its rank/host/time prefixes."""
    return PREFIX_RE.sub("", line, count=1)


def is_traceback(line: str) -> bool:
    return bool(TRACEBACK_RE.match(message_of(line)))


def job_id_from_path(pattern: str, path: str) -> str | None:
    """The first number in a path part matched by a wildcard of `pattern` (dirs first)."""
    pparts, parts = Path(pattern).parts, Path(path).parts
    if len(pparts) != len(parts):
        wild = list(parts[-1:])
    else:
        wild = [p for pat, p in zip(pparts, parts, strict=True) if glob.has_magic(pat)]
    for part in wild:
        m = JOB_ID_RE.search(part)
        if m:
            return m.group(0)
    return None


@dataclass
class _Window:
    first_line_no: int
    lines: list[str]
    ts: float
    trigger: str
    quiet: int = 0  # ordinary lines since the last error line


def clip(line: str) -> str:
    """A log line as the wire takes it: colours and control characters cleaned, cut."""
    line = clean_text(line)
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


class WindowCutter:
    """Cuts error windows out of one file's lines; a plain object, tested on its own."""

    def __init__(self) -> None:
        self.before: deque[tuple[int, str]] = deque(maxlen=BEFORE_LINES)
        self.window: _Window | None = None
        self.cooldown = 0

    def feed(self, line_no: int, text: str, ts: float) -> list[_Window]:
        """Take one line; return the windows it closed."""
        done: list[_Window] = []
        hot = is_trigger(text)
        w = self.window
        if w is not None:
            w.lines.append(clip(text))
            if hot or is_traceback(text):
                w.quiet = 0
            else:
                w.quiet += 1
            if w.quiet >= AFTER_LINES or len(w.lines) >= MAX_WINDOW_LINES:
                if len(w.lines) >= MAX_WINDOW_LINES and w.quiet < AFTER_LINES:
                    self.cooldown = AFTER_LINES  # the burst goes on: no new window inside it
                done.append(w)
                self.window = None
        elif self.cooldown:
            self.cooldown = AFTER_LINES if hot or is_traceback(text) else self.cooldown - 1
        elif hot:
            first = self.before[0][0] if self.before else line_no
            lines = [clip(t) for _, t in self.before] + [clip(text)]
            self.window = _Window(first, lines, ts, message_of(clean_text(text)).strip()[:256])
            self.before.clear()
            return done
        if self.window is None:
            self.before.append((line_no, text))
        return done

    def close(self) -> list[_Window]:
        w, self.window = self.window, None
        return [w] if w is not None else []


class _File:
    def __init__(self, job: JobLog, tail: FileTail, now: float) -> None:
        self.job = job
        self.tail = tail
        self.cutter = WindowCutter()
        self.windows_sent = 0
        self.last_growth = now


PathSource = Callable[[float], dict[str, JobLog]]
"""now -> {log path: whose log} of the files to follow now."""


def glob_paths(patterns: list[str]) -> PathSource:
    def paths(now: float) -> dict[str, JobLog]:
        out: dict[str, JobLog] = {}
        for pattern in patterns:
            for path in sorted(glob.glob(pattern)):
                job_id = job_id_from_path(pattern, path)
                if job_id and os.path.isfile(path):
                    out.setdefault(path, JobLog(job_id))
        return out

    return paths


def local_slurm_jobs(proc: Path = Path("/proc")) -> set[str]:
    """Ids of the jobs whose steps run on this host, from its slurmstepd processes.

    Reads each process's 15-byte `comm` and only a slurmstepd's `cmdline`: no call to
    slurmctld, a small cost per process that a busy GPU node with 1,000 processes pays each
    round. Empty where the agent cannot see the host's processes (a
    container without the host's PID namespace): the minutely refresh then still finds jobs.
    """
    ids: set[str] = set()
    try:
        entries = [e for e in os.scandir(proc) if e.name.isdigit()]
    except OSError:
        return ids
    for entry in entries:
        try:
            with open(os.path.join(entry.path, "comm"), "rb") as f:
                if f.read().strip() != b"slurmstepd":
                    continue
            with open(os.path.join(entry.path, "cmdline"), "rb") as f:
                m = SLURMSTEPD_RE.match(f.read(64))
        except OSError:  # the process ended meanwhile
            continue
        if m:
            ids.add(m.group(1).decode())
    return ids


def output_path(pattern: str, f: dict[str, str], node: str) -> str:
    """The file Slurm writes for an `--output` / `--error` pattern, as sbatch(1) expands it;
    relative to the job's working directory, `slurm-%j.out` (`slurm-%A_%a.out` for an array)
    when none was given; a backslash anywhere turns expansion off."""
    array = f["ArrayTaskID"].isdigit()
    if not pattern:
        pattern = "slurm-%A_%a.out" if array else "slurm-%j.out"
    if "\\" in pattern:
        path = pattern.replace("\\", "")
    else:
        job_id = f["JobID"]
        values = {
            "%": "%",
            "A": f["ArrayJobID"] if array else job_id,
            "a": f["ArrayTaskID"] if array else "4294967294",  # Slurm's NO_VAL
            "j": job_id,
            "J": job_id,
            "N": f["BatchHost"] or node,
            "n": "0",
            "s": "batch",
            "t": "0",
            "u": f["UserName"],
            "x": f["Name"],
        }

        def one(m: re.Match[str]) -> str:
            value = values[m.group(2)]
            width = int(m.group(1) or 0)
            return value.zfill(width) if value.isdigit() and width else value

        path = OUTPUT_PATTERN_RE.sub(one, pattern)
    return path if path.startswith("/") else os.path.join(f["WorkDir"], path)


def slurm_paths(
    node: str,
    run: Callable[[list[str]], str] | None = None,
    local_jobs: Callable[[], set[str]] = local_slurm_jobs,
) -> PathSource:
    """Stdout/stderr of the jobs Slurm runs on `node`: asked every SLURM_REFRESH_S, and at
    once when a job id not seen before runs on this host (`local_jobs`)."""
    from collectors.watchers.slurmtext import (
        SlurmError,
        field_separator,
        fields_format,
        run_command,
        split_fields,
    )

    runner = run or run_command
    state: dict[str, Any] = {"at": None, "paths": {}, "local": set(), "scanned": None}

    def paths(now: float) -> dict[str, JobLog]:
        started_here: set[str] = set()
        if state["scanned"] is None or now - state["scanned"] >= LOCAL_SCAN_S:
            state["scanned"] = now
            local = local_jobs()
            started_here = local - state["local"]
            state["local"] = local
        recent = state["at"] is not None and now - state["at"] < SLURM_REFRESH_S
        if recent and not started_here:
            return state["paths"]
        state["at"] = now
        sep = field_separator()
        fmt = fields_format(SQUEUE_LOG_FIELDS, sep)
        try:
            text = runner(["squeue", "-h", "-w", node, "-t", "RUNNING", "-O", fmt])
        except SlurmError as exc:
            log.warning("squeue -w %s: %s", node, exc)
            return state["paths"]
        out: dict[str, JobLog] = {}
        for f in split_fields(text, sep, SQUEUE_LOG_FIELDS):
            if not (f["JobID"].isdigit() and f["UserID"].isdigit()):
                log.warning(
                    "squeue -w %s: a row with job %r, uid %r", node, f["JobID"], f["UserID"]
                )
                continue
            job = JobLog(f["JobID"], int(f["UserID"]), f["UserName"])
            # No --error: stderr goes where stdout does.
            for pattern in {f["STDOUT"], f["STDERR"] or f["STDOUT"]}:
                out.setdefault(output_path(pattern, f, node), job)
        state["paths"] = out
        return out

    return paths


class JobLogSource:
    """Follows the job log files of one node and returns their error windows."""

    def __init__(
        self,
        cluster: str,
        node: str,
        paths: list[PathSource],
        state_dir: Path | None = None,
        min_uid: int = MIN_UID,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.path_sources = paths
        self.min_uid = min_uid
        self.state_path = None if state_dir is None else Path(state_dir) / f"joblogs-{node}.json"
        self._saved = self._load()
        self._files: dict[str, _File] = {}
        self._dormant: dict[str, tuple[int, int]] = {}  # path -> (inode, size) when dropped
        self._refused: dict[str, str] = {}  # path -> why, warned once until it changes
        self._first_scan = True

    def _load(self) -> dict[str, Any]:
        if self.state_path is None:
            return {}
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _opener(self, path: str, job: JobLog) -> Opener:
        """Opens `path` for `job` as the module docstring says; a refusal is warned once."""

        def open_checked(p: Path) -> int:
            try:
                fd = open_no_follow(p)
                reason = job_log_refusal(os.fstat(fd), job, self.min_uid)
                if reason is not None:
                    os.close(fd)
                    raise UnsafeFile(errno.EPERM, reason, str(p))
            except UnsafeFile as exc:
                if self._refused.get(path) != exc.strerror:
                    self._refused[path] = exc.strerror
                    log.warning("job %s: not reading %s: %s", job.job_id, path, exc.strerror)
                raise
            self._refused.pop(path, None)
            return fd

        return open_checked

    def _wanted(self, now: float) -> dict[str, JobLog]:
        wanted: dict[str, JobLog] = {}
        for source in self.path_sources:
            try:
                wanted.update({p: j for p, j in source(now).items() if p not in wanted})
            except Exception as exc:  # noqa: BLE001 (a path source failing skips one round)
                log.warning("job log paths: %s: %s", type(exc).__name__, exc)
        return wanted

    def poll(self, ts: float) -> list[NodeEvents]:
        wanted = self._wanted(ts)
        windows: list[LogWindowIn] = []
        for path, job in wanted.items():
            if path in self._files:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if self._dormant.get(path) == (st.st_ino, st.st_size):
                continue
            self._dormant.pop(path, None)
            saved = self._saved.get(path)
            from_end = (
                self._first_scan and saved is None and time.time() - st.st_mtime > STARTUP_BACKLOG_S
            )
            tail = FileTail(path, position=saved, from_end=from_end, opener=self._opener(path, job))
            self._files[path] = _File(job, tail, ts)
        self._first_scan = False
        for path, f in list(self._files.items()):
            lines = f.tail.read()
            closed = []
            if lines:
                f.last_growth = ts
            for line_no, text in lines:
                closed.extend(f.cutter.feed(line_no, text, ts))
            if not lines and ts - f.last_growth >= QUIET_CLOSE_S:
                closed.extend(f.cutter.close())
            windows.extend(self._ship(path, f, closed))
            if path not in wanted and f.cutter.window is None:
                # No longer listed (the job ended): stop following until the file changes.
                pos = f.tail.position
                self._dormant[path] = (pos["inode"] or 0, pos["offset"])
                f.tail.close()
                del self._files[path]
                self._refused.pop(path, None)
        return [NodeEvents(self.cluster, self.node, log_windows=windows)] if windows else []

    def _ship(self, path: str, f: _File, closed: list[_Window]) -> list[LogWindowIn]:
        out = []
        for w in closed:
            if f.windows_sent >= MAX_WINDOWS_PER_FILE:
                if f.windows_sent == MAX_WINDOWS_PER_FILE:
                    log.warning(
                        "%s: %d error windows sent; no more for this file", path, f.windows_sent
                    )
                    f.windows_sent += 1
                continue
            f.windows_sent += 1
            out.append(
                LogWindowIn(
                    job_id=f.job.job_id[:128],
                    ts=w.ts,
                    path=clean_text(path)[:1024],
                    first_line_no=max(w.first_line_no, 1),
                    lines=w.lines[:MAX_WINDOW_LINES],
                    trigger=w.trigger,
                )
            )
        return out

    def finish(self) -> list[NodeEvents]:
        windows: list[LogWindowIn] = []
        for path, f in self._files.items():
            windows.extend(self._ship(path, f, f.cutter.close()))
        return [NodeEvents(self.cluster, self.node, log_windows=windows)] if windows else []

    def commit(self) -> None:
        if self.state_path is None:
            return
        # Position of what is read; lines of a window still open were read but not sent, and
        # would be lost by a crash now: they are few, the alternative (re-reading) repeats.
        data = {p: f.tail.position for p, f in self._files.items() if f.tail.position["inode"]}
        if data == self._saved:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(f".{self.state_path.name}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.state_path)
        self._saved = data

    def close(self) -> None:
        for f in self._files.values():
            f.tail.close()
        self._files = {}
