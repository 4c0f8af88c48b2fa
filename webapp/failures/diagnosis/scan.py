"""The streaming scan: each input read in binary chunks, only the lines worth parsing decoded.

A cheap literal prefilter (one RE2 pass over the chunk for the anchors of rules.yaml, ASCII
case folded) yields the few lines worth parsing; only those are decoded (UTF-8, errors
replaced), stripped of their prefixes and matched against the ordered rules (first match
wins); a line repeated verbatim is parsed once. Memory stays bounded (a chunk, a 256 KiB tail,
capped events and parsed lines) whatever the size; binary chunks are skipped.

Each input is a `LogStream` that says whether it may carry kernel evidence. A job's own log
may not: a line in it that looks like a kernel line (`NVRM: Xid ...`, `kernel: ...`) is text
the job printed, and it never becomes an event, so a user cannot get a node blamed by
printing one. The kernel log, the node agent's NVML and kernel watchers and a combined
capture an operator hands to `manage.py diagnose` may.

RE2, NumPy and google-re2's private match binding (with its public fallback) are used here
alone.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import re2

from webapp.failures.diagnosis.catalogue import DEFERRED_CAUSES, Catalogue, Rule, first_rule
from webapp.failures.diagnosis.events import Event, event_of
from webapp.failures.diagnosis.lines import (
    FLAT_TRACEBACK,
    Line,
    is_kernel_line,
    parse_line,
    unflattened,
)

CHUNK_BYTES = 8 << 20  # read size; large enough that per-chunk overhead is negligible
TAIL_BYTES = 256 << 10  # end of the log kept for the loss curve and the failure time
# What one diagnosis reads is bounded, whatever a job prints: parsing a line costs time
# linear in its length (lines.py, RE2 rules), and these caps bound the lines and bytes parsed.
# A longer line is cut before decoding (binary junk, base64 blobs, crafted lines): prefixes
# and rule phrases sit at the start of a line.
MAX_LINE_BYTES = 8192
# Lines parsed per diagnosis (verbatim repeats included) and their bytes, all inputs together:
# a few times what a 100 MB failed-job log holds (the 10 MB bench log parses 27,000 lines,
# 6 MB). Past either cap, lines are counted but not parsed until each input's last TAIL_BYTES,
# which are parsed whatever the caps: a failure is told at the end of its log.
MAX_PARSED_LINES = 500_000
MAX_PARSED_BYTES = 64 << 20
MAX_EVENTS_PER_RULE = 200  # first occurrences kept per rule: the earliest decide
# Parsed lines remembered per diagnosis for verbatim repeats (then all forgotten at once);
# only short ones, so that the memory stays small (a few MB) whatever the log.
SEEN_LINES = 2048
SEEN_LINE_CHARS = 512
MAX_FLAT_PARSED = 16  # anchored lines parsed per one-line traceback (Scan._flattened)
MAX_FRAME_LOOKUPS = 500  # traceback look-backs per file (pathological logs stay linear)
FRAME_LOOKBACK_BYTES = 16384
FRAME_LOOKBACK_LINES = 120
# torchrun's failure record: "time : t", "host : h" then "rank : n (local_rank: m)",
# "exitcode : -11", "error_file", "traceback : Signal 11 ..." (NVIDIA/Megatron-LM#1880). The
# host line names the host of the events on this many anchored lines after it.
RECORD_LINES = 4
# NCCL communicator init lines remembered (rank, size, host): a job of thousands of ranks
# prints one per rank and communicator; past this the ranks already mapped must do.
MAX_NCCL_RANKS = 16384
# A chunk whose sample has more than 10% control bytes is binary (text, UTF-8 included, has
# almost none; random bytes have 13%).
BINARY_CONTROL_SHARE = 0.10


class LogStream(NamedTuple):
    """One input of a diagnosis: its name (quoted in the evidence), its bytes, and whether its
    kernel-looking lines count as kernel evidence (False for a job's own log)."""

    name: str
    data: BinaryIO
    kernel_evidence: bool = True
    # The node whose agent shipped this stream (a job log window), when known: the node that
    # printed its lines, which a host named inside the text may not be (decide.py blame).
    host: str | None = None


@functools.cache
def line_pattern(cat: Catalogue) -> Any:
    """RE2 pattern whose matches are the whole lines (without the newline) holding an anchor.

    One pass over a chunk yields the lines worth parsing, in order, with no Python work between
    them. Latin-1 mode makes every byte but \\n a line byte (invalid UTF-8 included); case
    folding in that mode is ASCII-only for ASCII anchors, as bytes.lower() is.
    """
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.case_sensitive = False
    alternation = b"|".join(re.escape(a) for a in cat.anchors)
    return re2.compile(b"[^\\n]*(?:" + alternation + b")[^\\n]*", options)


@dataclass
class Record:
    """The torchrun failure record being read (rules.yaml torchrun-failure-record)."""

    file_index: int
    host: str
    rank: int | None
    lines_left: int
    failed_at: float | None  # its "time" field (seconds, UTC as printed)
    root_cause: bool  # under "Root Cause (first observed failure)"


class Scan:
    """State of one diagnosis over one or more files (bounded whatever the input size)."""

    def __init__(self, cat: Catalogue) -> None:
        self.cat = cat
        self.line_rx = line_pattern(cat)
        self.events: list[Event] = []
        self.per_rule: dict[str, int] = {}
        self.rank_host: dict[int, str] = {}
        # Hosts a scheduler record or the job's runner names as the job's own
        # (rules.yaml scheduler-exec-host, runner-host).
        self.exec_hosts: set[str] = set()
        # srun task id -> host, from "srun: error: <host>: task 3: Exited ..." (or "tasks 0-3"):
        # only for lines that srun --label tagged with the same task id ("3: ...").
        self.task_host: dict[int, str] = {}
        # IP address -> host, from the NCCL interface lines each host prints
        # (rules.yaml nccl-interface-address): peers named by address resolve through it.
        self.ip_host: dict[str, str] = {}
        # Hosts a pasted shell prompt inspects the GPUs of (rules.yaml shell-prompt-host).
        self.inspected_hosts: set[str] = set()
        # The DeepSpeed launcher printed a rank's exit status (launcher-rank-exit-status).
        self.launcher_exit_status = False
        # The launcher or srun was told to stop by a signal from outside the job
        # (_EXTERNAL_STOP_RULES): a rank killed after it died of that stop (decide.py).
        self.external_stop = False
        # (file index, line) of srun's reports of a task ending badly ("srun: error: <host>:
        # task N: ..."): a step cancel printed after one is its consequence (decide.py).
        self.srun_task_failures: list[tuple[int, int]] = []
        # (file index, line) of traceback frames in an object-storage client
        # (rules.yaml storage-client-frame): a connection error next to them is the store's.
        self.storage_frames: list[tuple[int, int]] = []
        # (file index, line) of lines naming an object store's endpoint or URL
        # (rules.yaml storage-endpoint-mention): a retryable error on the next lines is the store's.
        self.storage_urls: list[tuple[int, int]] = []
        # The torchrun failure record being read, and the time and heading of the next one.
        self.record: Record | None = None
        self.record_time: float | None = None
        self.record_root = False
        # (communicator rank, communicator size) -> host, from NCCL's init lines
        # (rules.yaml nccl-init-rank): the largest communicator's ranks are the global ones.
        self.nccl_ranks: dict[tuple[int, int], str] = {}
        self.bytes_total = 0
        self.binary_bytes = 0
        self.lines_total = 0
        self.frame_lookups = 0
        self.tails: list[tuple[int, str, int, bytes]] = []  # (file index, name, last line, tail)
        self.notes: list[str] = []
        # Lines already parsed, with the rule their message matched: logs repeat lines
        # verbatim (retries, per-step warnings), and parsing is most of a line's cost.
        self.seen: dict[str, tuple[Line, Rule | None]] = {}
        self.flat_seen: set[str] = set()  # one-line tracebacks already read (_flattened)
        # Whether the stream being read may carry kernel evidence (LogStream.kernel_evidence),
        # and the kernel-looking lines of streams that may not, which made no event.
        self.kernel_evidence = True
        self.kernel_lines_ignored = 0
        # Per input (file index): whether it may carry kernel evidence, and the node it came
        # from where known (LogStream).
        self.kernel_files: set[int] = set()
        self.stream_host: dict[int, str] = {}
        # What is left of the parse caps, and the first line of the input being read that the
        # caps left unparsed (read again from its tail at the end of the input).
        self.lines_left = MAX_PARSED_LINES
        self.bytes_left = MAX_PARSED_BYTES
        self.unparsed_from: int | None = None
        self.lines_unparsed = 0
        # The last line a C++ exception's what() began that no rule matched: (file index, line,
        # text), read again joined to the next line (_wrapped_what).
        self.what: tuple[int, int, str] | None = None
        # MPICH Hydra's box names the host of the process it reports ("=   PID 92248 RUNNING
        # AT gpu-7"), a line before its "=   EXIT CODE: 9": (file index, line, host).
        self.hydra_host: tuple[int, int, str] | None = None

    # Reading -------------------------------------------------------------------------------

    def scan(
        self,
        stream: BinaryIO,
        file_index: int,
        name: str,
        kernel_evidence: bool = True,
        host: str | None = None,
    ) -> None:
        """Read one input to its end, recording the events of its lines."""
        self.kernel_evidence = kernel_evidence
        if kernel_evidence:
            self.kernel_files.add(file_index)
        if host:
            self.stream_host[file_index] = host
        line_no = 1  # number of the first line of the next piece
        bytes_before = self.bytes_total
        carry = b""
        tail = b""
        context = b""  # end of the previous piece, for traceback look-back across chunks
        while True:
            block = stream.read(CHUNK_BYTES)
            if not block:
                if carry:
                    piece = carry + b"\n"
                    _, lines = self._piece(piece, len(piece), line_no, file_index, name, context)
                    tail = (tail + piece)[-TAIL_BYTES:] if not self._binary(piece) else tail
                    line_no += lines
                break
            self.bytes_total += len(block)
            buf = carry + block if carry else block
            cut = buf.rfind(b"\n")
            if cut == -1 and len(buf) < CHUNK_BYTES:
                carry = buf
                continue
            if cut == -1:  # an 8 MiB "line": binary or broken; cut it anyway
                piece, end, carry = buf + b"\n", len(buf) + 1, b""
            else:  # the piece is buf[:end], scanned in place (a slice would copy the chunk)
                piece, end, carry = buf, cut + 1, buf[cut + 1 :]
            binary, lines = self._piece(piece, end, line_no, file_index, name, context)
            line_no += lines
            if not binary:
                tail = (tail + piece[max(0, end - TAIL_BYTES) : end])[-TAIL_BYTES:]
                context = piece[max(0, end - FRAME_LOOKBACK_BYTES) : end]
        if self.unparsed_from is not None:
            whole = self.bytes_total - bytes_before <= len(tail)
            self._tail_parse(tail, line_no - 1, file_index, name, whole)
        self.lines_total += line_no - 1
        self.tails.append((file_index, name, line_no - 1, tail))
        self._cut_last_line(tail, line_no - 1, file_index, name)

    def _cut_last_line(self, tail: bytes, last_line: int, file_index: int, name: str) -> None:
        """Read the input's last line as the one catalogued message it begins, where the log
        was cut inside it and its own words name no cause (_cut_completion)."""
        body = tail.rstrip(b"\r\n\t ")
        if not body or self._binary(body):
            return
        at = body.rfind(b"\n") + 1
        text = body[at:].decode("utf-8", "replace").rstrip("\r")
        line = parse_line(text)
        own = first_rule(self.cat, line.message)
        if own is not None and own.cause != "by_exception":
            return  # its own words already decide
        rule = _cut_completion(self.cat, line.message)
        if rule is None:
            return
        line_no = last_line - max(0, tail[len(body) :].count(b"\n") - 1)
        before = len(self.events)
        self._line(
            text, line, rule, line_no, file_index, name, lambda: _lines_before(body, at, b"")
        )
        if len(self.events) > before:
            if own is not None:
                # The class alone read the cut line (python-exception): its completion does.
                self.events = [
                    e
                    for e in self.events[:before]
                    if (e.file_index, e.line_no, e.rule.id) != (file_index, line_no, own.id)
                ] + self.events[before:]
            self.notes.append(
                f"{name}: its last line is cut; read as the only catalogued message it begins "
                f"({rule.id})"
            )

    def _tail_parse(
        self, tail: bytes, last_line: int, file_index: int, name: str, whole: bool
    ) -> None:
        """Parse the lines of the tail that the caps left unparsed (whatever the caps)."""
        # The first line may be cut unless the tail is the whole input; the last piece is the
        # empty one after the final newline.
        lines = tail.split(b"\n")[0 if whole else 1 : -1]
        first = last_line - len(lines) + 1
        skip = max(0, self.unparsed_from - first)
        self.unparsed_from = None
        if skip >= len(lines):
            return
        piece = b"\n".join(lines[skip:]) + b"\n"
        lines_left, bytes_left = self.lines_left, self.bytes_left
        self.lines_left, self.bytes_left = len(lines), len(piece)
        self._piece(piece, len(piece), first + skip, file_index, name, b"")
        self.lines_left, self.bytes_left = lines_left, bytes_left
        self.notes.append(
            f"{name}: {self.lines_unparsed} line(s) before its last {len(piece)} bytes were not "
            f"parsed (over the {MAX_PARSED_LINES} lines / {MAX_PARSED_BYTES >> 20} MiB a "
            "diagnosis parses)"
        )
        self.lines_unparsed = 0

    def _binary(self, piece: bytes, end: int | None = None) -> bool:
        end = len(piece) if end is None else end
        for sample in (piece[: min(end, 65536)], piece[max(0, end - 65536) : end]):
            controls = len(sample.translate(None, _NON_CONTROL))
            if controls <= BINARY_CONTROL_SHARE * len(sample):
                return False
        return True

    def _piece(
        self,
        piece: bytes,
        end: int,
        first_line: int,
        file_index: int,
        name: str,
        context: bytes,
    ) -> tuple[bool, int]:
        """Scan piece[:end] (whole lines): (is it binary, its number of lines)."""
        if self._binary(piece, end):
            # NUL padding (sparse or preallocated files, a crash mid-write) around text: drop
            # the NULs (newlines stay, so line numbers do) and read the text that is left.
            text = piece[:end].translate(None, b"\0")
            if len(text) < 2 or self._binary(text):
                self.binary_bytes += end
                return True, piece.count(b"\n", 0, end)
            self.binary_bytes += end - len(text)
            piece, end = text, len(text)
        # One RE2 pass (a DFA over the anchors) yields the lines that hold an anchor, whole
        # and in order; only those are decoded and parsed.
        cat, seen, rank_host = self.cat, self.seen, self.rank_host
        line_no, counted = first_line, 0
        for start, stop in _spans(self.line_rx, piece, end):
            stop = min(stop, start + MAX_LINE_BYTES)
            if self.lines_left <= 0 or self.bytes_left < stop - start:
                if self.unparsed_from is None:
                    self.unparsed_from = line_no + _newlines(piece, counted, start)
                self.lines_unparsed += 1
                continue
            self.lines_left -= 1
            self.bytes_left -= stop - start
            text = piece[start:stop].decode("utf-8", "replace")
            text = text.rstrip("\r")
            known = seen.get(text)
            if known is None:
                line = parse_line(text)
                known = (line, first_rule(cat, line.message))
                if len(text) <= SEEN_LINE_CHARS:
                    if len(seen) >= SEEN_LINES:
                        seen.clear()
                    seen[text] = known
            line, rule = known
            if line.host and line.rank is not None:
                rank_host.setdefault(line.rank, line.host)
            if self.record is not None:
                self.record.lines_left -= 1
                if self.record.lines_left < 0 or self.record.file_index != file_index:
                    self.record = None
            if "task" in text and "srun" in text:
                line_no += _newlines(piece, counted, start)
                counted = start
                self._srun_tasks(text, file_index, line_no)
            if rule is not None and rule.id == LAUNCHER_EXIT_STATUS_RULE:
                self.launcher_exit_status = True
            elif rule is not None and rule.id in _EXTERNAL_STOP_RULES:
                self.external_stop = True
            if rule is not None and rule.kind == "ignore" and rule.id in _HOST_MAP_RULES:
                self._host_map(rule.id, line, file_index)
            if "\\n" in text and FLAT_TRACEBACK in text:
                line_no += _newlines(piece, counted, start)
                counted = start
                self._flattened(text, line, line_no, file_index, name)
                continue
            if rule is not None and rule.id in _STORAGE_RULES:
                line_no += _newlines(piece, counted, start)
                counted = start
                self._storage(rule.id, file_index, line_no)
            if rule is None and line.message.startswith("=") and "RUNNING AT" in line.message:
                m = _HYDRA_HOST.match(line.message)
                if m:
                    line_no += _newlines(piece, counted, start)
                    counted = start
                    self.hydra_host = (file_index, line_no, m.group(1))
                continue
            if rule is None and (self.what is not None or line.message.startswith(WHAT)):
                line_no += _newlines(piece, counted, start)
                counted = start
                wrapped = self._wrapped_what(text, line, file_index, line_no)
                if wrapped is not None:
                    self._line(*wrapped, file_index, name, list)
                continue
            if rule is None or rule.kind == "ignore":
                continue
            # Lines are numbered only where an event may be made, and counted in one pass.
            line_no += _newlines(piece, counted, start)
            counted = start
            before = functools.partial(_lines_before, piece, start, context)
            self._line(text, line, rule, line_no, file_index, name, before)
        return False, line_no - first_line + _newlines(piece, counted, end)

    def _wrapped_what(
        self, text: str, line: Line, file_index: int, line_no: int
    ) -> tuple[str, Line, Rule, int] | None:
        """A what() line no rule matched and the line after it, read as one message: a
        terminal or a paste wraps a long what() ("cudaMalloc fail" / "ed: out of memory",
        TuSimple/mx-maskrcnn#98), and the reason is on the second line. (text, line, rule,
        line number) of the joined message where a rule matches it, else None."""
        pending, self.what = self.what, None
        if line.message.startswith(WHAT):
            self.what = (file_index, line_no, text)
            return None
        if pending is None or pending[:2] != (file_index, line_no - 1):
            return None
        joined_text = f"{pending[2].rstrip()} {line.message}"
        joined = parse_line(joined_text)
        rule = first_rule(self.cat, joined.message)
        if rule is None or rule.kind == "ignore":
            return None
        return joined_text, joined, rule, pending[1]

    def _flattened(self, text: str, outer: Line, line_no: int, file_index: int, name: str) -> None:
        """Read a traceback printed as one escaped line (lines.unflattened) line by line: its
        frames decide framework or script for its exception, as they would on their own
        lines; the outer line's host, rank and time are those of what it holds."""
        if text in self.flat_seen:
            return  # a repeat reads as the first did
        if len(self.flat_seen) >= SEEN_LINES:
            self.flat_seen.clear()
        self.flat_seen.add(text)
        parts = unflattened(text) or []
        # Only the lines inside that hold an anchor are parsed, as in the scan (one RE2 pass
        # over them all), and only the last MAX_FLAT_PARSED of them: the final exception and
        # the error lines next to it. Frames are read by the look-back, as on separate lines.
        data = "\n".join(parts).encode("utf-8", "replace")
        ends = list(itertools.accumulate(len(p.encode("utf-8", "replace")) + 1 for p in parts))
        anchored = sorted(
            {bisect.bisect_right(ends, start) for start, _ in _spans(self.line_rx, data, len(data))}
        )
        anchored = (
            anchored[-min(MAX_FLAT_PARSED, max(0, self.lines_left)) :]
            if self.lines_left > 0
            else []
        )
        self.lines_left -= len(anchored)  # each counts toward the parse caps as a line would
        for i in anchored:
            part = parts[i]
            known = self.seen.get(part)
            if known is None:
                line = parse_line(part)
                known = (line, first_rule(self.cat, line.message))
                if len(self.seen) < SEEN_LINES and len(part) <= SEEN_LINE_CHARS:
                    self.seen[part] = known
            line, rule = known
            if rule is None:
                continue
            if rule.id in _STORAGE_RULES:
                self._storage(rule.id, file_index, line_no)
                continue
            if rule.kind == "ignore":
                continue
            before = functools.partial(_parts_before, parts, i)
            self._line(part, line, rule, line_no, file_index, name, before, outer)

    def _storage(self, rule_id: str, file_index: int, line_no: int) -> None:
        """Remember where an object-store client frame or a store's endpoint was named."""
        seen = self.storage_frames if rule_id == "storage-client-frame" else self.storage_urls
        if len(seen) < MAX_EVENTS_PER_RULE:
            seen.append((file_index, line_no))

    def _srun_tasks(self, text: str, file_index: int, line_no: int) -> None:
        """Learn which host ran which srun task from srun's per-task error line (and where
        srun reported a task failed)."""
        m = _SRUN_TASKS.search(text)
        if m is None:
            return
        if "srun: error: " in m.group(0) and len(self.srun_task_failures) < MAX_EVENTS_PER_RULE:
            self.srun_task_failures.append((file_index, line_no))
        for lo, hi in _TASK_RANGE.findall(m.group(2)):
            for task in range(int(lo), int(hi or lo) + 1)[:MAX_TASKS_PER_LINE]:
                self.task_host.setdefault(task, m.group(1))

    def _host_map(self, rule_id: str, line: Line, file_index: int) -> None:
        """Learn a host from a line of a launcher's or scheduler's rank-to-host map."""
        message = line.message
        if rule_id == "nccl-interface-address":
            if line.host:
                for ip in _IPV4.findall(message):
                    self.ip_host.setdefault(ip, line.host)
            return
        if rule_id == "shell-prompt-host":  # "user@host ~ % nvidia-smi"
            self.inspected_hosts.add(re.split(r"[: ]", message.split("@", 1)[1], maxsplit=1)[0])
            return
        if rule_id == "nccl-init-rank":
            m = _NCCL_INIT.search(message)
            if line.host and m and len(self.nccl_ranks) < MAX_NCCL_RANKS:
                self.nccl_ranks.setdefault((int(m.group(1)), int(m.group(2))), line.host)
            return
        if rule_id == "srun-launch-tasks":
            return  # read with srun's error lines (_srun_tasks)
        key, _, value = message.strip().partition(":")
        value = value.strip()
        if rule_id == "scheduler-exec-host":
            self.exec_hosts.add(value.split("/")[0])
        elif rule_id == "runner-host":
            self.exec_hosts.add(value.split("@", 1)[1].split(",")[0].strip())
        elif key.startswith("Root Cause"):
            self.record_root = True
        elif key.startswith("time"):
            try:
                when = datetime.strptime(value, "%Y-%m-%d_%H:%M:%S").replace(tzinfo=UTC)
                self.record_time = when.timestamp()
            except ValueError:
                self.record_time = None
        elif key.startswith("host"):
            self.record = Record(
                file_index, value, None, RECORD_LINES, self.record_time, self.record_root
            )
            self.record_time, self.record_root = None, False
        elif self.record is not None:  # "rank : 0 (local_rank: 0)" of the record being read
            rank = int(value.split()[0])
            self.rank_host.setdefault(rank, self.record.host)
            self.record.rank = rank

    def host_of_rank(self, rank: int) -> str | None:
        """The host the log maps a global rank to: a line with both ([rank3] under a host
        prefix, a torchrun record), else NCCL's init line for the largest communicator."""
        host = self.rank_host.get(rank)
        if host is None and self.nccl_ranks:
            world = max(size for _, size in self.nccl_ranks)
            host = self.nccl_ranks.get((rank, world))
        return host

    # Classifying ---------------------------------------------------------------------------

    def _line(
        self,
        text: str,
        line: Line,
        rule: Rule,
        line_no: int,
        file_index: int,
        name: str,
        lines_before: Callable[[], list[str]],
        outer: Line | None = None,
    ) -> None:
        """Record the event of a line that `rule` (not an ignore rule) matched; `lines_before`
        gives the lines before it (nearest first), `outer` the line it was printed inside."""
        if not self.kernel_evidence and is_kernel_line(line):
            # Text a job printed, not what its node's kernel said: no event, and it counts
            # toward no rule's cap (that would crowd out the real kernel lines read later).
            self.kernel_lines_ignored += 1
            return
        count = self.per_rule.get(rule.id, 0)
        if count >= MAX_EVENTS_PER_RULE and rule.cause not in ("by_xid", "by_exception"):
            # Past the cap an event would be dropped: skip building it (a rule that always
            # yields an event counts the line as building it would).
            self.per_rule[rule.id] = count + 1
            return
        before = None
        # An exception-tier cause looks back too: at its traceback's frames, or at the
        # chain it ends (events.py).
        looks_back = rule.cause == "by_exception" or (rule.tier, rule.kind) == (
            "exception",
            "cause",
        )
        if looks_back and self.frame_lookups < MAX_FRAME_LOOKUPS:
            before = lines_before
        ev = event_of(text, line, rule, before)
        if ev is None:
            return
        if looks_back:
            self.frame_lookups += 1
        self.per_rule[rule.id] = count + 1
        if count >= MAX_EVENTS_PER_RULE:
            return
        ev.file_index, ev.file, ev.line_no = file_index, name, line_no
        if ev.host is None and self.hydra_host is not None and ev.text.startswith("="):
            f, at, host = self.hydra_host
            if f == file_index and 0 < line_no - at <= HYDRA_BOX_LINES:
                ev.host = host
        if outer is not None:
            ev.host = ev.host or outer.host
            ev.rank = outer.rank if ev.rank is None else ev.rank
            ev.stamp = ev.stamp or outer.stamp
        if self.record is not None and ev.host is None:
            # A line of a torchrun failure record: the record's host and rank are its own.
            ev.host = self.record.host
            ev.rank = self.record.rank if ev.rank is None else ev.rank
            ev.failed_at, ev.root_cause = self.record.failed_at, self.record.root_cause
        self.events.append(ev)


def _newlines(buf: bytes, lo: int, hi: int) -> int:
    """buf.count(b"\\n", lo, hi). A long span is counted by numpy, 256 KiB at a time (bytes.count
    tests one byte per step; numpy compares 32, and the block stays in the cache)."""
    if hi - lo < _NEWLINE_BLOCK:
        return buf.count(b"\n", lo, hi)
    data = np.frombuffer(buf, np.uint8, hi - lo, lo)
    return sum(
        int(np.count_nonzero(data[i : i + _NEWLINE_BLOCK] == 10))
        for i in range(0, hi - lo, _NEWLINE_BLOCK)
    )


_NEWLINE_BLOCK = 1 << 18


_RE2_ANCHOR = getattr(re2, "_Anchor", None)  # private in google-re2: see _spans


def _spans(rx: Any, buf: bytes, end: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each match of an RE2 pattern in buf[:end].

    google-re2's finditer() builds a Match object per hit in Python; its binding's Match()
    returns the spans alone, at half the cost per line. That binding is private (the version
    is pinned in pyproject.toml); should a release drop it, the public finditer() serves.
    """
    binding = getattr(rx, "_regexp", None)
    if binding is None or _RE2_ANCHOR is None:
        for m in rx.finditer(buf, 0, end):
            yield m.span()
        return
    match, unanchored, pos = binding.Match, _RE2_ANCHOR.UNANCHORED, 0
    while pos < end:
        start, stop = match(unanchored, buf, pos, end)[0]
        if start < 0:
            return
        yield start, stop
        pos = stop if stop > start else stop + 1


# Where an object store is named: a client's traceback frame, an endpoint or URL (decide.py).
_STORAGE_RULES = frozenset({"storage-client-frame", "storage-endpoint-mention"})
LAUNCHER_EXIT_STATUS_RULE = "launcher-rank-exit-status"
_EXTERNAL_STOP_RULES = frozenset({"elastic-agent-signal", "srun-forced-termination"})
# Hydra's box (https://github.com/pmodels/mpich/blob/main/src/pm/hydra/mpiexec/mpiexec.c):
# "=   PID 92248 RUNNING AT gpu-7", then "=   EXIT CODE: 9" a line or two below it.
_HYDRA_HOST = re.compile(r"=\s+PID \d+ RUNNING AT ([A-Za-z0-9][\w.-]*)\s*$")
HYDRA_BOX_LINES = 3
# libstdc++'s verbose terminate handler prints an uncaught exception's message after this
# (https://gcc.gnu.org/onlinedocs/libstdc++/manual/termination.html).
WHAT = "what():"
_HOST_MAP_RULES = frozenset(
    {
        "scheduler-exec-host",
        "runner-host",
        "shell-prompt-host",
        "torchrun-failure-record",
        "nccl-interface-address",
        "nccl-init-rank",
        "srun-launch-tasks",
    }
)
# "srun: error: node-03: task 12: Exited with exit code 1", "srun: error: gpu-1: tasks 0-3,8: ...",
# and srun -v's "srun: launching StepId=4.0 on host node1, 4 tasks: [0-3]" ("1 tasks: 0").
_SRUN_TASKS = re.compile(
    r"srun: (?:error: |launching \S+ on host )([A-Za-z0-9][\w.-]*)(?::|, \d+) tasks?:? \[?([\d,-]+)"
)
_TASK_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_NCCL_INIT = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nranks (\d+)", re.I)
MAX_TASKS_PER_LINE = 4096  # a range this long is a whole job's, not worth mapping task by task
_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})<\d+>")

_NON_CONTROL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 32 or b == 127))


# A log cut at its end (a pasted excerpt, a job killed mid-write) may end inside a message:
# "RuntimeError: CUDA error: an illegal memory acc". Such a last line is read as a catalogued
# message (a rule's own example, read as that rule) only where it is a proper beginning of
# messages of exactly one rule and holds at least CUT_MIN_CHARS characters of the message (what
# follows its exception's class, where it has one: the class alone tells little); shorter or
# shared beginnings stay unread (a wrong cause is worse than unknown).
CUT_MIN_CHARS = 20
_CLASS_HEAD = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*: ")


def _after_class(message: str) -> str | None:
    """What follows an exception's class at the start of a message ("X.YError: ..."), or None."""
    m = _CLASS_HEAD.match(message)
    return message[m.end() :] if m else None


@functools.cache
def _catalogued_messages(cat: Catalogue) -> tuple[tuple[str, str | None, Rule], ...]:
    """(message, what follows its class, rule) of each cause rule's examples that read as it."""
    out = []
    for rule in cat.line_rules:
        if rule.kind != "cause" or rule.cause in DEFERRED_CAUSES:
            continue
        for example in rule.examples:
            msg = parse_line(example).message
            if first_rule(cat, msg) is rule:
                out.append((msg, _after_class(msg), rule))
    return tuple(out)


def _cut_completion(cat: Catalogue, message: str) -> Rule | None:
    """The one rule whose catalogued messages `message` is a proper beginning of, or None."""
    message = message.rstrip()
    rest = _after_class(message)
    words = message if rest is None else rest  # the message's own words
    if len(words) < CUT_MIN_CHARS:
        return None
    rules = set()
    for msg, msg_rest, rule in _catalogued_messages(cat):
        # Under its class, the words follow the same class or any other (RuntimeError's
        # wording raised as torch's own class); without a class, what follows any.
        whole = rest is not None and len(msg) > len(message) and msg.startswith(message)
        own = msg_rest is not None and len(msg_rest) > len(words) and msg_rest.startswith(words)
        bare = rest is None and len(msg) > len(message) and msg.startswith(message)
        if whole or own or bare:
            rules.add(rule.id)
            if len(rules) > 1:
                return None
    if len(rules) != 1:
        return None
    (rid,) = rules
    return next(r for r in cat.line_rules if r.id == rid)


def _parts_before(parts: list[str], i: int) -> list[str]:
    """The lines of an unflattened traceback before its i-th, nearest first."""
    return parts[:i][::-1]


def _lines_before(piece: bytes, start: int, context: bytes) -> list[str]:
    """Up to FRAME_LOOKBACK_LINES lines before `start`, nearest first."""
    lo = max(0, start - FRAME_LOOKBACK_BYTES)
    seg = piece[lo:start]
    if lo == 0 and context:
        seg = context + seg
    lines = seg.decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lo > 0 or (lo == 0 and context):
        lines = lines[1:]  # the first one may be cut
    return lines[::-1][:FRAME_LOOKBACK_LINES]
