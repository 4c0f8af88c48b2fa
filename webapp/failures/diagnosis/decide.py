"""The decision: what a scan found becomes one Diagnosis (docs/failure-taxonomy.md "Ordering").

Keep the events inside the window [failure - 15 min, failure + 2 min], coalesce repeats of one
(node, GPU, signature) within 5 s, take the highest-priority tier and the earliest event in it
(causes before symptoms), blame its node/GPU (or the rank with the lowest "last completed NCCL
work", or the peer host named in a socket error), and say how sure that is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import webapp.failures.diagnosis.exits as exits
from webapp.failures import taxonomy
from webapp.failures.diagnosis.divergence import _loss_events
from webapp.failures.diagnosis.events import EVIDENCE_TEXT_CHARS, Event, Evidence
from webapp.failures.diagnosis.lines import Stamp, folded, kernel_hint, parse_line
from webapp.failures.diagnosis.scan import Scan

EVIDENCE_LINES = 12  # evidence lines kept per diagnosis: the chosen event, then the others
# Window: docs/failure-taxonomy.md step 1 ([failure - 15 min, failure + 2 min]); widened to the
# NCCL timeout + 5 min when the watchdog reports a longer timeout (PyTorch defaults to 10 min,
# older code 30 min, docs/failure-signatures.md section 2), so the cause of a long hang stays in.
WINDOW_BEFORE_S = 15 * 60
WINDOW_AFTER_S = 2 * 60
COALESCE_S = 5.0  # docs/failure-taxonomy.md step 2
# Confidence: a rule's own (rules.yaml) is adjusted by what else the window holds. These are
# Vigil's own calibration, not measured values: a diagnosis shows its confidence, and no
# ordering, action or threshold depends on it.
# Another cause of the same tier in the window: earliest-first chose between two explanations
# the catalogue ranks equal, so the choice is less sure. x0.85 keeps a contested 0.95 rule
# (0.81) above an uncontested 0.75 one, and brings a contested 0.75 one (0.64) near the 0.6 of
# a cause told by a name alone (events.NAME_ONLY_CONFIDENCE).
RIVAL_CAUSE_FACTOR = 0.85
# The chosen cause seen more than once (repeats, other ranks or nodes): corroboration, worth
# less than one step of the 0.05 grid rules.yaml is written in, so that repeats never lift an
# event above a rule one step more confident.
REPEATED_CAUSE_BONUS = 0.03
# Never certain: a log can be cut or lose lines, and the cause may sit in a log not given.
MAX_CONFIDENCE = 0.99
# srun --label's task prefix "3: " (lines.py takes the task id for the rank).
_SRUN_LABEL = re.compile(r"\s*\d{1,5}: ")
# rules.yaml `last_only`: the event must be among the last lines of its file.
LAST_ONLY_LINES = 3
# A connection error this many lines from an object-storage client's traceback frame is the
# store's (a chained traceback's frames follow the error that started it within a screen).
STORAGE_FRAME_LINES = 60
# An endpoint or URL of a store this many lines from a retryable error is the one it failed on
# (a client logs the request, then its error; a wrapped traceback puts the URL a line away).
# Closer than STORAGE_FRAME_LINES: a URL is named in logs far more often than a client frame.
STORAGE_URL_LINES = 3
# A Java exception's own frames follow it; its message (a JSON error body) may run this many
# lines before the first.
JAVA_FRAME_LINES = 12
# A slurmstepd line names the node of the slurmstepd lines this close after it (its own burst).
SCHEDULER_NEIGHBOUR_LINES = 3
# Ranks listed in the exit-verdict note (Diagnosis.notes), the first failed first.
VERDICTS_SHOWN = 8
# Diagnosis.blame_evidence values.
BLAME_NODE_AGENT = "node_agent"
BLAME_SCHEDULER = "scheduler"
BLAME_JOB_LOG = "job_log"


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    category: str
    action: str
    acme_alias: str | None
    detail: str
    blamed_node: str | None
    blamed_gpu: str | None
    blamed_rank: int | None
    confidence: float
    evidence: tuple[Evidence, ...]
    rule_id: str | None
    symptoms: tuple[str, ...] = ()
    # What the blamed node rests on, for recovery to weigh: BLAME_NODE_AGENT (a kernel or NVML
    # line from a stream that may carry kernel evidence: the node agent's, never a job's own
    # output), BLAME_SCHEDULER (a Slurm program's line from such a stream: the scheduler's own
    # record of the job, which Vigil writes from the job's state), BLAME_JOB_LOG (text a job or
    # its launcher printed, Slurm-looking lines in its own log included: a user can forge it),
    # "" (no node blamed).
    blame_evidence: str = ""
    bytes_scanned: int = 0
    lines_scanned: int = 0
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, keys in a fixed order."""
        return {
            "cause": self.cause,
            "category": self.category,
            "action": self.action,
            "acme_alias": self.acme_alias,
            "detail": self.detail,
            "blamed_node": self.blamed_node,
            "blamed_gpu": self.blamed_gpu,
            "blamed_rank": self.blamed_rank,
            "confidence": self.confidence,
            "rule_id": self.rule_id,
            "blame_evidence": self.blame_evidence,
            "evidence": [
                {"file": e.file, "line": e.line, "text": e.text, "rule_id": e.rule_id}
                for e in self.evidence
            ],
            "symptoms": list(self.symptoms),
            "bytes_scanned": self.bytes_scanned,
            "lines_scanned": self.lines_scanned,
            "notes": list(self.notes),
        }


def _resolve_stamp(stamp: Stamp | None, year: int) -> tuple[float, str] | None:
    if stamp is None:
        return None
    style, y, mo, d, hh, mi, ss, frac = stamp
    try:
        base = datetime(y or year, mo, d, hh, mi, ss, tzinfo=UTC).timestamp()
    except ValueError:
        return None
    return base + frac, style


def _tail_stamps(tails: list[tuple[int, str, int, bytes]]) -> list[Stamp]:
    stamps = []
    for _, _, _, tail in tails:
        for text in tail[-32768:].decode("utf-8", "replace").split("\n")[1:]:
            parsed = parse_line(text)
            if parsed.stamp and parsed.program != "kernel" and not kernel_hint(folded(text)):
                stamps.append(parsed.stamp)
    return stamps


def decide(scan: Scan, job_nodes: Iterable[str] | None = None) -> Diagnosis:
    """Apply the window, coalescing, ordering and blame rules to what a scan found."""
    ends = {file_index: last_line for file_index, _, last_line, _ in scan.tails}
    events = [
        e
        for e in scan.events
        if not e.rule.last_only or e.line_no > ends.get(e.file_index, 0) - LAST_ONLY_LINES
    ]
    events += _loss_events(scan.cat, scan.tails)
    notes = list(scan.notes)
    if scan.kernel_lines_ignored:
        notes.append(
            f"{scan.kernel_lines_ignored} kernel-looking line(s) in the job's own log not taken "
            "as evidence: kernel evidence comes from the kernel log and NVML"
        )
    tail_stamps = _tail_stamps(scan.tails)
    stamps = [e.stamp for e in events if e.stamp] + tail_stamps
    years = [s[1] for s in stamps if s[1]]
    year = min(years) if years else 2000
    for e in events:
        resolved = _resolve_stamp(e.stamp, year)
        if resolved:
            e.ts, e.ts_style = resolved

    # Window around the failure: the last dated job/scheduler line (not kernel lines, whose
    # clock may run on after the job).
    job_times: dict[str, list[float]] = {}
    for s in [e.stamp for e in events if e.stamp and not e.is_kernel] + tail_stamps:
        resolved = _resolve_stamp(s, year)
        if resolved:
            job_times.setdefault(resolved[1], []).append(resolved[0])
    timeouts = [e.timeout_ms / 1000 for e in events if e.timeout_ms]
    before = max([WINDOW_BEFORE_S] + [t + 300 for t in timeouts])
    after = WINDOW_AFTER_S
    if any(e.tier == "hang" and e.ts is None for e in events):
        # Undated watchdog lines: the job's last dated line may be the last step before the
        # hang, so the cause can come up to one NCCL timeout (default 10 min) after it.
        after += max([600.0] + timeouts) + 300
    failure_at = {style: max(ts) for style, ts in job_times.items()}
    nodes = set(job_nodes or ())
    kept = []
    for e in events:
        end = failure_at.get(e.ts_style or "")
        if e.ts is not None and end is not None and not end - before <= e.ts <= end + after:
            continue
        if nodes and e.is_kernel and e.host and e.host not in nodes:
            continue
        kept.append(e)
    if len(kept) < len(events):
        notes.append(
            f"{len(events) - len(kept)} event(s) outside the failure window or the job's nodes"
        )
    events = _coalesce(sorted(kept, key=lambda e: e.seq))

    if not events:
        return _unknown(scan, notes)
    if scan.launcher_exit_status or any(
        e.rule.cause == "by_exit" and e.rule.kind != "cause" for e in events
    ):
        # The guess for a launcher's kill with no rank's word (rules.yaml
        # launcher-killed-silent-rank) is for a log cut before the launcher's verdict: where
        # the verdict is there, its signal is the evidence (the exit table reads it), and a
        # plain exit status is a rank that exited by itself; a guess is never kept over it.
        events = [e for e in events if e.rule.id != SILENT_RANK_RULE]
        if not events:
            return _unknown(scan, notes)
    # Candidates for the cause: the events less the consequences of another (they stay
    # evidence, and a node they name still blames).
    candidates = events
    after_task = [
        e
        for e in events
        if e.rule.id == STEP_CANCELLED_RULE
        and any(f == e.file_index and line < e.line_no for f, line in scan.srun_task_failures)
    ]
    if after_task:
        # srun cancels a step's other tasks once one of them failed: a step cancel after srun's
        # report of a failed task is that failure's consequence (the task's signal, read by the
        # exit table, or a plain exit status that says nothing), not a cancel by a user. A task
        # reported Killed after the cancel died of the cancel, which stays the outcome.
        candidates = [e for e in candidates if e not in after_task]
        notes.append("the step was cancelled after one of its tasks failed")
    if scan.external_stop:
        # The launcher (torchrun's agent) or srun was told to stop by a signal from outside the
        # job, a scheduler's or a person's: ranks SIGKILLed after it died of that stop, not of
        # the OOM killer the exit table's guess names; the stop's own reason, where printed,
        # decides.
        stopped = [e for e in candidates if e.rule.id == SILENT_RANK_RULE or _sigkill_verdict(e)]
        if stopped:
            candidates = [e for e in candidates if e not in stopped]
            notes.append("the job was stopped from outside: a rank killed after it is not an OOM")
    if any(not e.rule.alone_only for e in candidates):
        # A shell's "command not found" decides only when nothing else does: a job script
        # prints it and goes on, and whatever ended the job is told by the other lines.
        candidates = [e for e in candidates if not e.rule.alone_only]
    if any(e.cause != "unknown" for e in candidates):
        # A report that names no cause of its own (an exception class that reports another
        # failure, events.py) abstains: never chosen over an event that names one, however
        # weak (a launcher's or shell's verdict on the process that died).
        candidates = [e for e in candidates if e.cause != "unknown"]
    if not candidates:
        return _unknown(scan, notes)
    best = _pick(candidates)
    what = _terminate_message(best, events)
    if what is not None:
        # std::terminate's "terminate called after throwing an instance of X" is the abort an
        # uncaught C++ exception causes; its what() line is that exception's message, the
        # cause (c10::Error's "CUDA error: out of memory" is the GPU's memory, not a crash).
        # Where the message is itself a consequence (an NCCL error, a symptom), the abort is
        # read as that message and the cause is chosen again without it: a CUDA OOM raised
        # before it is the cause, else the message.
        notes.append("the abort follows an uncaught C++ exception, read by its what()")
        terminate = best
        best = (
            what if what.kind == "cause" else _pick([e for e in candidates if e is not terminate])
        )
    own = _crashed_process_cause(best, events)
    if own is not None:
        # A crash report and a cause printed by the same process (host and pid): a library
        # that failed to allocate (NCCL's "Cuda failure 2 'out of memory'") and then crashed on
        # the pointer it did not get. The crash is that failure's consequence.
        notes.append("the crashed process reported its own failure: the crash follows it")
        best = own
    crashed = _crashed_worker(best, events)
    if crashed is not None:
        # The DataLoader's own report of its worker's crash ("ERROR: Unexpected bus error
        # encountered in worker"), printed by the worker's signal handler just before the
        # signal's default action runs faulthandler's "Fatal Python error: Bus error": one
        # crash, the worker's (docs/failure-taxonomy.md: a DataLoader worker killed by a signal
        # stays dataloader_killed).
        notes.append("the native crash report is a DataLoader worker's")
        best = crashed
    worker = _killed_worker(best, events)
    if worker is not None:
        # A memory cgroup's OOM killer chose a DataLoader worker: the job's own memory limit,
        # spent by its workers, and the worker's report is the failure the job saw
        # (docs/failure-taxonomy.md: a DataLoader worker killed by a signal stays
        # dataloader_killed). The node-wide OOM killer choosing one stays host_oom: the node
        # ran out, which recovery weighs.
        notes.append(f"the memory cgroup's OOM kill of {worker[1]} is a DataLoader worker's")
        best = worker[0]
    if best.rule.id == "data-pipe-read-failed" and _names_store(best, scan):
        # Root cause over the reader that reported it: the shard came from an object store.
        best.cause, best.detail, best.action = "object_storage", "object storage read failed", None
        notes.append("the failed read names an object store's URL")
    elif best.cause == "aux_connection" and _names_store(best, scan):
        # Root cause over the client that reported it: a retryable HTTP or connection error
        # on an object store's endpoint, on its line or the lines next to it, is the store's.
        best.cause, best.detail, best.action = "object_storage", "object storage unavailable", None
        notes.append("the error names an object store's endpoint")
    elif best.cause == "aux_connection" and any(
        f == best.file_index and abs(line - best.line_no) <= STORAGE_FRAME_LINES
        for f, line in scan.storage_frames
    ):
        # Root cause over the frame that raised it: a connection error inside an object-store
        # client's frames (a chained traceback through botocore) is the storage endpoint's.
        best.cause, best.detail, best.action = "object_storage", "object storage unavailable", None
        notes.append("the connection error was raised inside an object-storage client")
    elif best.rule.id == "fs-errno" and any(
        f == best.file_index and 0 <= best.line_no - line <= STORAGE_FRAME_LINES
        for f, line in scan.storage_frames
    ):
        # Root cause over the errno that reported it: an object-store client (s3fs, gcsfs)
        # raises its store's error as an OSError with an errno ("[Errno 5] An error occurred
        # (SlowDown) when calling the PutObject operation"): the store's, not a disk's.
        best.cause, best.detail, best.action = "object_storage", "object storage unavailable", None
        notes.append("the errno was raised inside an object-storage client")
    elif best.rule.cause == "by_exception" and any(
        f == best.file_index and 0 < line - best.line_no <= JAVA_FRAME_LINES
        for f, line in scan.storage_frames
    ):
        # The same for a Java exception whose top frames are an object-store client's.
        best.cause, best.detail, best.action = "object_storage", "object storage unavailable", None
        notes.append("the exception was raised inside an object-storage client")
    return _diagnosis(best, events, scan, notes, nodes)


SILENT_RANK_RULE = "launcher-killed-silent-rank"
_SIGKILL_DETAIL = exits.SIGNALS[9].label


def _sigkill_verdict(e: Event) -> bool:
    """Whether an event is a parent's verdict of SIGKILL on a process (the exit table's)."""
    return e.rule.cause == "by_exit" and e.tier == "weak" and e.detail == _SIGKILL_DETAIL


STEP_CANCELLED_RULE = "slurm-step-cancelled"
# The lines between std::terminate's line and its what() (a launcher's rank prefix keeps them
# together; the what() is the next line).
TERMINATE_WHAT_LINES = 2


def _terminate_message(best: Event, events: list[Event]) -> Event | None:
    """The cause event on the what() line of the uncaught C++ exception `best` reports, if any
    (libstdc++'s verbose terminate handler: "terminate called after throwing an instance of
    'X'" then "  what():  <message>", https://gcc.gnu.org/onlinedocs/libstdc++/manual/
    termination.html)."""
    if best.cause != "native_crash" or "terminate called after throwing" not in best.text:
        return None
    return next(
        (
            e
            for e in events
            if e.file_index == best.file_index
            and 0 < e.line_no - best.line_no <= TERMINATE_WHAT_LINES
            and e.cause != "native_crash"
            and "what():" in e.text
        ),
        None,
    )


# The process a line is printed by, where its prefix names one: UCX's crash report
# "[host:pid:thread:tid]" or "[host:pid :0:tid]", Open MPI's "[host:pid]", NCCL's and the
# NCCL plugins' "host:pid:tid [dev]".
_PROCESS = re.compile(r"\[?([A-Za-z0-9][\w.-]*):(\d+)(?: ?:\d+:\d+\]|\]|:\d+ )")


def _process_of(text: str) -> tuple[str, str] | None:
    m = _PROCESS.match(text.lstrip())
    return (m.group(1), m.group(2)) if m else None


def _crashed_process_cause(best: Event, events: list[Event]) -> Event | None:
    """A cause that the process whose native crash report `best` is printed itself (same file,
    host and pid), of a tier the crash report outranks."""
    if best.cause != "native_crash":
        return None
    proc = _process_of(best.text)
    if proc is None:
        return None
    return next(
        (
            e
            for e in events
            if e is not best
            and e.kind == "cause"
            and e.file_index == best.file_index
            and taxonomy.TIER_RANK[e.tier] > taxonomy.TIER_RANK[best.tier]
            and e.cause not in ("native_crash", "unknown")
            and e.rule.cause != "by_exit"
            and _process_of(e.text) == proc
        ),
        None,
    )


# The lines between a DataLoader worker's own crash report and the crash report that follows
# it from the same process (its signal handler prints one, then faulthandler the other).
WORKER_CRASH_LINES = 3


def _crashed_worker(best: Event, events: list[Event]) -> Event | None:
    """The DataLoader's report of a worker crash next to the native crash report `best`."""
    if best.cause != "native_crash":
        return None
    return next(
        (
            e
            for e in events
            if e.cause == "dataloader_killed"
            and e.file_index == best.file_index
            and abs(best.line_no - e.line_no) <= WORKER_CRASH_LINES
        ),
        None,
    )


_WORKER_PIDS = re.compile(r"DataLoader worker \(pid(?:\(s\)|s)? ([0-9, ]+)\)")
_OOM_PID = re.compile(r"Memory cgroup out of memory: Kill(?:ed)? process ([0-9]+)")


def _killed_worker(best: Event, events: list[Event]) -> tuple[Event, str] | None:
    """(the DataLoader's event, the pid) when `best` is a memory cgroup's OOM kill of a process
    a DataLoader reported as its killed worker, else None."""
    if best.cause != "host_oom":
        return None
    m = _OOM_PID.search(best.text)
    if m is None:
        return None
    for e in events:
        wm = _WORKER_PIDS.search(e.text) if e.cause == "dataloader_killed" else None
        if wm and m.group(1) in re.split(r"[, ]+", wm.group(1)):
            return e, m.group(1)
    return None


def _names_store(e: Event, scan: Scan) -> bool:
    """Whether an event's line, or one of the STORAGE_URL_LINES around it, names an object
    store's endpoint or URL (rules.yaml storage-endpoint-mention)."""
    rule = next((r for r in scan.cat.rules if r.id == "storage-endpoint-mention"), None)
    if rule is not None and rule.regex.search(e.text):
        return True
    return any(
        f == e.file_index and abs(line - e.line_no) <= STORAGE_URL_LINES
        for f, line in scan.storage_urls
    )


def _coalesce(events: list[Event]) -> list[Event]:
    """One event per (node, GPU, signature) burst within COALESCE_S (taxonomy step 2)."""
    out: list[Event] = []
    last: dict[tuple, Event] = {}
    for e in events:
        key = (e.host, e.gpu, e.rule.id, e.cause, e.detail, e.signature, e.rank)
        prev = last.get(key)
        if prev is not None and (
            e.ts is None or prev.ts is None or abs(e.ts - prev.ts) <= COALESCE_S
        ):
            prev.count += 1
            continue
        last[key] = e
        out.append(e)
    return out


def _pick(events: list[Event]) -> Event:
    """Causes before symptoms and outcomes; then tier; then the earliest in that tier."""

    def group(e: Event) -> tuple[int, int]:
        # A scheduler record naming the reason (tier "reason") ranks with the causes.
        causal = e.kind == "cause" or e.tier == "reason"
        return (0 if causal else 1, taxonomy.TIER_RANK[e.tier])

    top = min(group(e) for e in events)
    tied = [e for e in events if group(e) == top]
    styles = {e.ts_style for e in tied}
    if len(styles) == 1 and None not in styles:
        best = min(tied, key=lambda e: (e.ts, e.seq))
    else:
        best = min(tied, key=lambda e: e.seq)
    best = _chain_root(best, tied)
    if best.failed_at is not None or best.root_cause:
        # torchrun lists the other failures before the first one, and each node's agent
        # prints its own records: the first failed rank is the earliest record, the one
        # torchrun names the root cause where two share a second.
        records = [e for e in tied if e.failed_at is not None or e.root_cause]
        best = min(
            records,
            key=lambda e: (
                e.failed_at if e.failed_at is not None else math.inf,
                not e.root_cause,
                e.seq,
            ),
        )
    return best


def _chain_root(best: Event, tied: list[Event]) -> Event:
    """The root cause of a JVM exception chain: the JVM prints the exception first and its
    causes after it ("Caused by: ..."), the root last, where Python prints the root first; the
    last "Caused by:" event that follows `best` with no other event of its tier between."""
    root = best
    following = sorted(
        (e for e in tied if e.file_index == best.file_index and e.line_no > best.line_no),
        key=lambda e: e.seq,
    )
    for e in following:
        if not e.chained:
            break
        root = e
    return root


def _diagnosis(
    best: Event, events: list[Event], scan: Scan, notes: list[str], nodes: set[str]
) -> Diagnosis:
    cause = taxonomy.CAUSES[best.cause]
    node, gpu, rank = best.host, best.gpu, best.rank
    if best.rule.blame == "none":
        node = gpu = rank = None
    elif best.rule.blame == "peer":
        peers = [e.peer for e in events if e.peer and e.tier == best.tier]
        # A peer named by address is the host whose NCCL interface line gave that address.
        node, gpu, rank = (scan.ip_host.get(peers[0], peers[0]) if peers else None), None, None
        if node is None:
            notes.append("no peer host named: run the pairwise NCCL test to locate the node")
    if best.cause == "nccl_timeout" and best.kind != "cause":
        # Blame rule 4: the rank with the lowest "last completed NCCL work".
        progress = [(e.last_completed, e.rank) for e in events if e.last_completed is not None]
        lowest = min((p for p in progress if p[1] is not None), default=None)
        if lowest and sum(1 for p in progress if p[0] == lowest[0]) == 1:
            rank, node, gpu = lowest[1], None, None
        else:
            node = gpu = rank = None
    if best.rule.blame != "none" and node is None and rank is not None:
        node = scan.host_of_rank(rank)
        if node is None and _SRUN_LABEL.match(best.text):
            # srun --label's "3: ..." is srun task 3: the host srun named for task 3.
            node = scan.task_host.get(rank)
    if best.rule.blame == "line" and node is None:
        # "The rank/node that errored first": the earliest event of this cause naming a node.
        named = [e for e in events if e.cause == best.cause and e.host]
        if named and best.cause not in ("nccl_timeout",):
            node = min(named, key=lambda e: e.seq).host
    if node is None and best.rule.blame == "line" and best.cause != "nccl_timeout":
        if len(scan.exec_hosts) == 1:
            # The job's one node, named by the scheduler record (PBS "Exec host", the failed
            # node of cBio/cbio-cluster#187) or by its runner (mmcv's "Start running, host:",
            # TuSimple/centerformer#4): a one-node job errored there.
            node = next(iter(scan.exec_hosts))
        elif best.tier in ("hardware", "node") and len(scan.inspected_hosts) == 1:
            # A GPU fault no line names a host for, pasted with the shell prompt of the one
            # node whose GPUs were inspected (rwth-i6/returnn#1486).
            node = next(iter(scan.inspected_hosts))
    if node is None and best.rule.blame == "line" and best.is_scheduler:
        # A slurmstepd line with no node in it: the same slurmstepd's next lines name its node
        # ("*** JOB 7518 ON xantipa CANCELLED AT ..." after the memory-limit kill it made,
        # coqui-ai/STT#2238).
        after = [
            e
            for e in events
            if e.is_scheduler
            and e.host
            and e.file_index == best.file_index
            and 0 < e.line_no - best.line_no <= SCHEDULER_NEIGHBOUR_LINES
        ]
        if after:
            node = min(after, key=lambda e: e.seq).host
    blame_evidence = ""
    if node is not None:
        trusted = best.file_index in scan.kernel_files
        agent = best.is_kernel and trusted
        blame_evidence = (
            BLAME_NODE_AGENT
            if agent
            else BLAME_SCHEDULER
            if trusted and best.is_scheduler
            else BLAME_JOB_LOG
        )
        if nodes and node not in nodes and not agent:
            # A host named in printed text (an NCCL "host:pid:tid" prefix, a peer, an srun
            # line) that is not one of the job's nodes: any job can print any host's name, so
            # it is never blamed. The job's node that printed the line takes its place where
            # that is known; a peer is the other end, never the printer.
            printer = _printing_node(best, scan, nodes) if best.rule.blame == "line" else None
            notes.append(
                "a host named in the job's output is not one of the job's nodes: not blamed"
                + ("; blamed the job's node that printed the line" if printer else "")
            )
            node, gpu = printer, None
            if node is None:
                blame_evidence = ""
    action = best.action or cause.action.value

    confidence = best.confidence
    rivals = {e.cause for e in events if e.kind == "cause" and e.tier == best.tier} - {best.cause}
    if best.kind == "cause" and rivals:
        confidence *= RIVAL_CAUSE_FACTOR
        notes.append("other causes in the same tier: " + ", ".join(sorted(rivals)))
    if sum(e.count for e in events if e.cause == best.cause) > 1:
        confidence += REPEATED_CAUSE_BONUS
    confidence = round(min(confidence, MAX_CONFIDENCE), 2)

    others = sorted(
        (e for e in events if e is not best), key=lambda e: (taxonomy.TIER_RANK[e.tier], e.seq)
    )
    evidence, seen = [best], {(best.rule.id, best.host, best.cause)}
    for e in others:
        key = (e.rule.id, e.host, e.cause)
        if key not in seen and len(evidence) < EVIDENCE_LINES:
            seen.add(key)
            evidence.append(e)
    verdicts = _verdicts(events)
    if verdicts:
        notes.append("exit verdicts, first failed first: " + verdicts)
    detail = best.detail or ""
    if best.cause == "ib_link" and best.peer:
        # The peer is text of the line: a note (shown with the evidence), not the detail.
        host = scan.ip_host.get(best.peer)
        notes.append(f"completion error from peer {best.peer}{f' = {host}' if host else ''}")
    return Diagnosis(
        cause=cause.name,
        category=cause.category.value,
        action=action,
        acme_alias=taxonomy.acme_alias(cause.name, best.detail),
        detail=detail,
        blamed_node=node,
        blamed_gpu=gpu,
        blamed_rank=rank,
        confidence=confidence,
        evidence=tuple(Evidence(e.file, e.line_no, _counted(e), e.rule.id) for e in evidence),
        rule_id=best.rule.id,
        blame_evidence=blame_evidence,
        symptoms=tuple(sorted({e.cause for e in events} - {best.cause})),
        bytes_scanned=scan.bytes_total,
        lines_scanned=scan.lines_total,
        notes=tuple(notes),
    )


def _verdicts(events: list[Event]) -> str:
    """How each rank ended, as the launchers and the processes themselves report it, the
    first failed first (a torchrun record's time, then the record torchrun names the root
    cause, then the log's order); "" unless at least two ranks or processes are named."""
    ended = [e for e in events if e.rule.cause == "by_exit"]
    ended.sort(
        key=lambda e: (
            e.failed_at if e.failed_at is not None else math.inf,
            not e.root_cause,
            e.seq,
        )
    )
    seen: dict[tuple[str | None, int | None], str] = {}
    for e in ended:
        if (e.host, e.rank) in seen:
            continue
        who = f"rank {e.rank}" if e.rank is not None else "a process"
        seen[(e.host, e.rank)] = f"{who}{f' on {e.host}' if e.host else ''}: {e.detail}"
    if len(seen) < 2:
        return ""
    shown = list(seen.values())[:VERDICTS_SHOWN]
    more = len(seen) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def _printing_node(e: Event, scan: Scan, nodes: set[str]) -> str | None:
    """The job's node that printed the event's line, where that is known: the node whose
    agent shipped the stream, the host the log maps the line's rank or srun task to (if one
    of the job's nodes), or the job's only node."""
    candidates = [scan.stream_host.get(e.file_index)]
    if e.rank is not None:
        candidates.append(scan.host_of_rank(e.rank))
        if _SRUN_LABEL.match(e.text):
            candidates.append(scan.task_host.get(e.rank))
    for host in candidates:
        if host in nodes:
            return host
    return next(iter(nodes)) if len(nodes) == 1 else None


def _counted(e: Event) -> str:
    return e.text if e.count == 1 else f"{e.text} [x{e.count}]"


def _unknown(scan: Scan, notes: list[str]) -> Diagnosis:
    cause = taxonomy.CAUSES["unknown"]
    if scan.bytes_total == 0:
        detail = "empty log: nothing to diagnose"
    elif scan.binary_bytes > scan.bytes_total // 2:
        detail = (
            f"not a text log: {scan.binary_bytes} of {scan.bytes_total} bytes look binary; "
            "nothing to diagnose"
        )
    else:
        detail = "no rule matched"
    evidence = []
    for _, name, last_line, tail in scan.tails:
        lines = [t for t in tail[-4096:].decode("utf-8", "replace").split("\n")[1:]]
        while lines and not lines[-1].strip():
            lines.pop()
        for i, text in enumerate(lines[-5:]):
            if text.strip():
                line_no = last_line - len(lines[-5:]) + 1 + i
                evidence.append(Evidence(name, line_no, text.strip()[:EVIDENCE_TEXT_CHARS], ""))
    return Diagnosis(
        cause=cause.name,
        category=cause.category.value,
        action=cause.action.value,
        acme_alias=None,
        detail=detail,
        blamed_node=None,
        blamed_gpu=None,
        blamed_rank=None,
        confidence=0.0,
        evidence=tuple(evidence[-EVIDENCE_LINES:]),
        rule_id=None,
        bytes_scanned=scan.bytes_total,
        lines_scanned=scan.lines_total,
        notes=tuple(notes),
    )
