"""Deterministic failure diagnosis: logs in, one Diagnosis out. Plain functions, no Django.

Pipeline (failure-taxonomy.md "Ordering"):
1. scan: read each file in binary chunks; a cheap literal prefilter (the anchors of
   rules.yaml, searched in the lowercased chunk at C speed) finds the few lines worth parsing;
   only those are decoded (UTF-8, errors replaced), stripped of their prefixes and matched
   against the ordered rules (first match wins). Kernel, scheduler and rank lines go through
   the same code whichever file they come from, so a combined capture diagnoses exactly like a
   job log plus `--kernel-log`.
2. decide: keep the events inside the window [failure - 15 min, failure + 2 min], coalesce
   repeats of one (node, GPU, signature) within 5 s, take the highest-priority tier and the
   earliest event in it (causes before symptoms), blame its node/GPU (or the rank with the
   lowest "last completed NCCL work", or the peer host named in a socket error).

Files are streamed: memory stays bounded (a chunk, a 256 KiB tail, capped events) whatever the
size; binary chunks are skipped; empty or binary input gets `unknown` with a reason.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import re2
import yaml

from webapp.failures import taxonomy

RULES_PATH = Path(__file__).with_name("rules.yaml")

CHUNK_BYTES = 8 << 20  # read size; large enough that per-chunk overhead is negligible
TAIL_BYTES = 256 << 10  # end of the log kept for the loss curve and the failure time
MAX_LINE_BYTES = 8192  # a longer line is cut before decoding (binary junk, base64 blobs)
EVIDENCE_TEXT_CHARS = 300
EVIDENCE_LINES = 12
DETAIL_CHARS = 120
MAX_EVENTS_PER_RULE = 200  # first occurrences kept per rule: the earliest decide
MAX_FRAME_LOOKUPS = 500  # traceback look-backs per file (pathological logs stay linear)
FRAME_LOOKBACK_BYTES = 16384
FRAME_LOOKBACK_LINES = 120
# Window: failure-taxonomy.md step 1 ([failure - 15 min, failure + 2 min]); widened to the
# NCCL timeout + 5 min when the watchdog reports a longer timeout (PyTorch defaults to 10 min,
# older code 30 min, failure-signatures.md section 2), so the cause of a long hang stays in.
WINDOW_BEFORE_S = 15 * 60
WINDOW_AFTER_S = 2 * 60
COALESCE_S = 5.0  # failure-taxonomy.md step 2
# Loss spike: failure-signatures.md section 4 (InternEvo alerts at > 1.5x the previous loss);
# "no recovery in W steps" with W = 5 printed values, baseline = median of the 50 before.
LOSS_SPIKE_FACTOR = 1.5
LOSS_SPIKE_STEPS = 5
LOSS_BASELINE_STEPS = 50
# A chunk whose sample has more than 10% control bytes is binary (text, UTF-8 included, has
# almost none; random bytes have 13%).
BINARY_CONTROL_SHARE = 0.10

EXCEPTIONS_IGNORED = frozenset(
    {"KeyboardInterrupt", "SystemExit", "GeneratorExit", "StopIteration"}
)
# Innermost frame in one of these packages = framework (failure-taxonomy.md: "a frame in
# site-packages (torch, megatron, deepspeed, transformers, ...) means framework"). Megatron and
# InternEvo usually run from a git checkout, not site-packages, hence the package names.
FRAMEWORK_PACKAGES = frozenset(
    {
        "torch",
        "megatron",
        "deepspeed",
        "transformers",
        "apex",
        "accelerate",
        "internevo",
        "internlm",
        "colossalai",
        "flash_attn",
        "datasets",
        "tokenizers",
        "vllm",
        "lightning",
        "pytorch_lightning",
        "fairscale",
        "triton",
        "peft",
        "trl",
        "nemo",
        "transformer_engine",
    }
)


class RuleError(ValueError):
    """rules.yaml is malformed (names the rule and the field)."""


# --- The rule catalogue ---------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    id: str
    cause: str  # a taxonomy cause, "by_xid" or "by_exception"
    kind: str  # cause | symptom | outcome | ignore
    tier: str  # a taxonomy tier or "by_xid"
    patterns: tuple[str, ...]
    regex: re.Pattern[str]
    # (literal every match must contain, lowercased, or "" if none; compiled pattern) pairs:
    # an `in` test on the lowercased message skips most patterns before any regex runs.
    checks: tuple[tuple[str, re.Pattern[str]], ...]
    at_start: bool
    blame: str  # line | peer | none
    confidence: float
    detail: str | None
    per_line: bool
    source: str
    examples: tuple[str, ...]


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key, compared cheaply
class Catalogue:
    anchors: tuple[bytes, ...]
    anchor_rx: Any  # re2 pattern: the anchors as one alternation
    rules: tuple[Rule, ...]
    line_rules: tuple[Rule, ...]
    loss: Rule


KINDS = ("cause", "symptom", "outcome", "ignore")
BLAMES = ("line", "peer", "none")


def _rule(raw: dict[str, Any]) -> Rule:
    rid = raw.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleError(f"rule without an id: {raw!r}")

    def need(key: str, ok: Callable[[Any], bool], what: str) -> Any:
        value = raw.get(key)
        if not ok(value):
            raise RuleError(f"rule {rid}: {key} must be {what}, got {value!r}")
        return value

    cause = need(
        "cause", lambda v: v in taxonomy.CAUSES or v in ("by_xid", "by_exception"), "a cause"
    )
    kind = need("kind", lambda v: v in KINDS, "one of " + ", ".join(KINDS))
    tier = need("tier", lambda v: v in taxonomy.TIER_RANK or v == "by_xid", "a tier")
    patterns = need("patterns", lambda v: isinstance(v, list) and v, "a non-empty list")
    blame = need("blame", lambda v: v in BLAMES, "one of " + ", ".join(BLAMES))
    confidence = need("confidence", lambda v: isinstance(v, int | float) and 0 <= v <= 1, "0..1")
    try:
        regex = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
    except re.error as exc:
        raise RuleError(f"rule {rid}: bad pattern: {exc}") from exc
    return Rule(
        id=rid,
        cause=cause,
        kind=kind,
        tier=tier,
        patterns=tuple(patterns),
        regex=regex,
        checks=tuple((required_literal(p), re.compile(p, re.IGNORECASE)) for p in patterns),
        at_start=bool(raw.get("at_start", False)),
        blame=blame,
        confidence=float(confidence),
        detail=raw.get("detail"),
        per_line=bool(raw.get("per_line", True)),
        source=str(raw.get("source", "")),
        examples=tuple(raw.get("examples") or ()),
    )


def required_literal(pattern: str) -> str:
    """The longest run of plain characters every match of `pattern` contains (lowercased).

    Only text outside groups and classes counts, and a character followed by a quantifier is
    dropped; a top-level alternation has no required literal ("").
    """
    runs, run, depth, i = [], "", 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.isalnum():
                runs.append(run)
                run = ""
            elif depth == 0:
                run += nxt
            i += 2
            continue
        if c == "[":
            j = pattern.index("]", i + 2 if pattern[i + 1 : i + 2] in ("]", "^") else i + 1)
            runs.append(run)
            run, i = "", j + 1
            continue
        if c in "?*{":
            run = run[:-1]
            runs.append(run)
            run = ""
        elif c == "+":
            runs.append(run)
            run = ""
        elif c == "(":
            depth += 1
            runs.append(run)
            run = ""
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return ""
        elif c in ".^$":
            runs.append(run)
            run = ""
        elif depth == 0:
            run += c
        i += 1
    runs.append(run)
    return max(runs, key=len).lower()


def _matches(rule: Rule, msg: str, low: str) -> re.Match[str] | None:
    for literal, regex in rule.checks:
        if literal and literal not in low:
            continue
        m = regex.match(msg) if rule.at_start else regex.search(msg)
        if m:
            return m
    return None


@functools.lru_cache(maxsize=8192)
def _first_rule(cat: Catalogue, msg: str) -> Rule | None:
    """The first rule matching a message (cached: logs repeat the same messages a lot)."""
    low = msg.lower()
    for rule in cat.line_rules:
        if _matches(rule, msg, low):
            return rule
    return None


def catalogue_parse(text: str) -> Catalogue:
    """Validate and compile a rule file's text."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not data.get("rules") or not data.get("anchors"):
        raise RuleError("rules file needs 'anchors' and 'rules' lists")
    rules = tuple(_rule(r) for r in data["rules"])
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise RuleError(f"rule id {rule.id} is used twice")
        seen.add(rule.id)
    line_rules = tuple(r for r in rules if r.per_line)
    loss = [r for r in rules if not r.per_line and r.cause == "loss_nan"]
    if len(loss) != 1:
        raise RuleError("exactly one per_line: false rule (the loss curve) is expected")
    anchors = tuple(str(a).lower().encode() for a in data["anchors"])
    return Catalogue(
        anchors=anchors,
        anchor_rx=re2.compile(b"|".join(re.escape(a) for a in anchors)),
        rules=rules,
        line_rules=line_rules,
        loss=loss[0],
    )


@functools.cache
def catalogue_load(path: str = str(RULES_PATH)) -> Catalogue:
    """The rule catalogue (parsed once per process)."""
    return catalogue_parse(Path(path).read_text(encoding="utf-8"))


# --- One line: prefixes, host, rank, time ---------------------------------------------------

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
_TS_ISO = re.compile(
    r"\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(Z|[+-]\d{2}:?\d{2})?\]?[ :|]\s*"
)
_TS_SYSLOG = re.compile(r"([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)? ")
_TS_DMESG_T = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s*"
)
_DMESG_UPTIME = re.compile(r"\[\s*\d+\.\d+\]\s*")
_SYSLOG_PRI = re.compile(r"<\d{1,3}>")
# "node-12 kernel: " after a journal/syslog timestamp: host then program.
_HOST_PROGRAM = re.compile(
    r"([A-Za-z0-9][\w.-]*) (kernel|slurm\w*|srun|sbatch|systemd|nv-fabricmanager|[\w.-]+\[\d+\]): "
)
_PROGRAM = re.compile(r"(kernel|slurmstepd|slurmd|slurmctld|srun|sbatch|salloc)(?:\[\d+\])?: ")
_RANK_PREFIX = re.compile(r"\[[Rr]ank ?(\d+)\]:?\s*")
_HOST_PID_TID = re.compile(r"([A-Za-z][\w.-]*):(\d+):(\d+) ")
_HOST_PREFIX = re.compile(r"([a-z][a-z0-9.-]*[0-9][a-z0-9.-]*|[a-z][a-z0-9]*-[a-z0-9.-]+): ")
_NOT_HOSTS = re.compile(r"(ib|ibp|eth|en|em|bond|nvme|sd|loop|md|dm|veth|lo|mlx)\d", re.I)
_TASK_LABEL = re.compile(r"(\d{1,5}): ")
_C10_PREFIX = re.compile(
    r"\[[EWIF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.\d+ (?:\d+ )?[\w./-]+:\d+\]\s*"
)
_C10_SHORT = re.compile(r"\[[EWIF] [\w./-]+:\d+\]\s*")
_RANK_IN_MSG = re.compile(r"\[(?:PG \d+ )?Rank (\d+)\]|\bRank (\d+):", re.I)

# A time without a year ("May 07 03:12:44", torch's "E0507 03:12:44"): resolved after the scan
# with the year of the log's dated lines, so the answer never depends on today's date.
Stamp = tuple[str, int, int, int, int, int, int, float]  # (style, y/0, mon, d, h, m, s, frac)


@dataclass(frozen=True)
class Line:
    text: str
    message: str
    host: str | None = None
    rank: int | None = None
    program: str | None = None
    stamp: Stamp | None = None


def parse_line(text: str) -> Line:
    """Strip the usual prefixes (timestamps, host, [rankN]:, srun labels, program names)."""
    rest = text.strip()
    host = rank = program = stamp = None
    for _ in range(10):
        m = _SYSLOG_PRI.match(rest)
        if m:
            rest = rest[m.end() :]
            continue
        m = _TS_ISO.match(rest)
        if m:
            y, mo, d, hh, mi, ss, frac, tz = m.groups()
            style = "aware" if tz else "naive"
            secs = float("0." + frac) if frac else 0.0
            if tz and tz != "Z":
                sign = 1 if tz[0] == "+" else -1
                off = int(tz[1:3]) * 3600 + int(tz[-2:]) * 60
                secs -= sign * off  # seconds east of UTC: subtract to get UTC
            stamp = stamp or (style, int(y), int(mo), int(d), int(hh), int(mi), int(ss), secs)
            rest = rest[m.end() :]
            m = _HOST_PROGRAM.match(rest)
            if m:
                host = host or _host(m.group(1))
                program = program or m.group(2).split("[")[0]
                rest = rest[m.end() :]
            continue
        m = _TS_DMESG_T.match(rest)
        if m:
            mon, d, hh, mi, ss, y = m.groups()
            month = _MONTHS.get(mon.lower(), 1)
            stamp = stamp or ("naive", int(y), month, int(d), int(hh), int(mi), int(ss), 0.0)
            rest = rest[m.end() :]
            continue
        m = _TS_SYSLOG.match(rest)
        if m and m.group(1).lower() in _MONTHS:
            mon, d, hh, mi, ss = m.groups()
            stamp = stamp or (
                "naive",
                0,
                _MONTHS[mon.lower()],
                int(d),
                int(hh),
                int(mi),
                int(ss),
                0.0,
            )
            rest = rest[m.end() :]
            m = _HOST_PROGRAM.match(rest)
            if m:
                host = host or _host(m.group(1))
                program = program or m.group(2).split("[")[0]
                rest = rest[m.end() :]
            continue
        m = _DMESG_UPTIME.match(rest)
        if m:
            program = program or "kernel"
            rest = rest[m.end() :]
            continue
        m = _RANK_PREFIX.match(rest)
        if m:
            rank = int(m.group(1)) if rank is None else rank
            rest = rest[m.end() :].lstrip()
            continue
        m = _C10_PREFIX.match(rest)
        if m:
            mo, d, hh, mi, ss = (int(g) for g in m.groups())
            stamp = stamp or ("naive", 0, mo, d, hh, mi, ss, 0.0)
            rest = rest[m.end() :]
            continue
        m = _C10_SHORT.match(rest)
        if m:
            rest = rest[m.end() :]
            continue
        m = _HOST_PROGRAM.match(rest)
        if m and _host(m.group(1)):
            host = host or m.group(1)
            program = program or m.group(2).split("[")[0]
            rest = rest[m.end() :]
            continue
        m = _PROGRAM.match(rest)
        if m:
            program = program or m.group(1)
            rest = rest[m.end() :]
            continue
        m = _HOST_PID_TID.match(rest)
        if m and _host(m.group(1)):
            host = host or m.group(1)
            rest = rest[m.end() :]
            continue
        m = _HOST_PREFIX.match(rest)
        if m and _host(m.group(1)):
            host = host or m.group(1)
            rest = rest[m.end() :].lstrip()
            continue
        m = _TASK_LABEL.match(rest)
        if m:
            rank = int(m.group(1)) if rank is None else rank
            rest = rest[m.end() :].lstrip()
            continue
        break
    if rank is None:
        m = _RANK_IN_MSG.search(rest)
        if m:
            rank = int(m.group(1) or m.group(2))
    return Line(text=text, message=rest, host=host, rank=rank, program=program, stamp=stamp)


def _host(name: str) -> str | None:
    """A host name, or None for what only looks like one (an interface: ib0, nvme0n1)."""
    if _NOT_HOSTS.match(name) or name.lower() in ("localhost",):
        return None
    return name


# --- Events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    file: str
    line: int
    text: str
    rule_id: str


@dataclass
class Event:
    file_index: int
    file: str
    line_no: int
    text: str
    rule: Rule
    cause: str
    tier: str
    kind: str
    confidence: float
    detail: str | None = None
    host: str | None = None
    rank: int | None = None
    gpu: str | None = None
    peer: str | None = None
    stamp: Stamp | None = None
    is_kernel: bool = False
    action: str | None = None
    last_completed: int | None = None
    timeout_ms: int | None = None
    count: int = 1
    ts: float | None = None  # resolved after the scan
    ts_style: str | None = None

    @property
    def seq(self) -> tuple[int, int]:
        return (self.file_index, self.line_no)


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)", re.I)
_NVRM_BDF = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F:.]+)", re.I
)
_EXC_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*([A-Za-z_][A-Za-z0-9_]*)")
_PEER = re.compile(
    r"(?:remote peer|from peer|Call to recv from|connect to|peer) \(?\[?([A-Za-z0-9][\w.:-]*?)\]?(?:<\d+>|:\d+|,|\)|\s|$)",
    re.I,
)
_SLURM_NODE = re.compile(
    r"Node failure on ([\w.-]+)|srun: error: ([\w.-]+): task|Nodes? ([\w.-]+) not responding|"
    r"^error: ([\w.-]+): task|, node: ([\w.-]+)",
    re.I,
)
_GPU_INDEX = re.compile(
    r"\(GPU (\d+);|GPU (\d+) has a total capacity|Device: (\d+)|cuda:(\d+)", re.I
)
_LAST_COMPLETED = re.compile(r"last completed NCCL work: (-?\d+)", re.I)
_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)", re.I)
_CANCELLED_AT = re.compile(r"CANCELLED AT (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})")
# Location noise at the start of a message, dropped from the detail: Slurm's "error: ",
# NCCL's "[2] transport/net_ib.cc:1712 NCCL WARN ", torch's "[E socket.cpp:957] ".
_DETAIL_NOISE = re.compile(
    r"^(?:error: |\[\d+\] (?:[\w./-]+:\d+ )?NCCL (?:WARN|INFO) |\[[EWI] [\w./-]+:\d+\] )+"
)
_FRAME = re.compile(r'File "([^"]+)", line \d+')
_KERNEL_HINT = re.compile(
    r"NVRM:|mlx5_core|lost carrier|Out of memory: Killed|blocked for more than|EXT4-fs|Memory cgroup",
    re.I,
)


def _frame_is_library(path: str) -> bool | None:
    """True: framework frame; False: user frame; None: stdlib or frozen (look further out)."""
    p = path.replace("\\", "/")
    if "site-packages/" in p or "dist-packages/" in p:
        return True
    if p.startswith("<") or re.search(r"/lib/python\d[.\d]*/", p):
        return None
    parts = p.split("/")
    return any(part in FRAMEWORK_PACKAGES for part in parts[:-1])


class _Scan:
    """State of one diagnosis over one or more files (bounded whatever the input size)."""

    def __init__(self, cat: Catalogue) -> None:
        self.cat = cat
        self.events: list[Event] = []
        self.per_rule: dict[str, int] = {}
        self.rank_host: dict[int, str] = {}
        self.bytes_total = 0
        self.binary_bytes = 0
        self.lines_total = 0
        self.frame_lookups = 0
        self.tails: list[tuple[int, str, int, bytes]] = []  # (file index, name, last line, tail)
        self.notes: list[str] = []

    # Reading -------------------------------------------------------------------------------

    def scan(self, stream: BinaryIO, file_index: int, name: str) -> None:
        line_no = 1  # number of the first line of the next piece
        carry = b""
        tail = b""
        context = b""  # end of the previous piece, for traceback look-back across chunks
        while True:
            block = stream.read(CHUNK_BYTES)
            if not block:
                if carry:
                    piece = carry + b"\n"
                    self._piece(piece, line_no, file_index, name, context)
                    tail = (tail + piece)[-TAIL_BYTES:] if not self._binary(piece) else tail
                    line_no += 1
                break
            self.bytes_total += len(block)
            buf = carry + block
            cut = buf.rfind(b"\n")
            if cut == -1 and len(buf) < CHUNK_BYTES:
                carry = buf
                continue
            if cut == -1:  # an 8 MiB "line": binary or broken; cut it anyway
                piece, carry = buf + b"\n", b""
            else:
                piece, carry = buf[: cut + 1], buf[cut + 1 :]
            binary = self._piece(piece, line_no, file_index, name, context)
            line_no += piece.count(b"\n")
            if not binary:
                tail = (tail + piece)[-TAIL_BYTES:]
                context = piece[-FRAME_LOOKBACK_BYTES:]
        self.lines_total += line_no - 1
        self.tails.append((file_index, name, line_no - 1, tail))

    def _binary(self, piece: bytes) -> bool:
        for sample in (piece[:65536], piece[-65536:]):
            controls = len(sample.translate(None, _NON_CONTROL))
            if controls <= BINARY_CONTROL_SHARE * len(sample):
                return False
        return True

    def _piece(
        self, piece: bytes, first_line: int, file_index: int, name: str, context: bytes
    ) -> bool:
        if self._binary(piece):
            # NUL padding (sparse or preallocated files, a crash mid-write) around text: drop
            # the NULs (newlines stay, so line numbers do) and read the text that is left.
            text = piece.translate(None, b"\0")
            if len(text) < 2 or self._binary(text):
                self.binary_bytes += len(piece)
                return True
            self.binary_bytes += len(piece) - len(text)
            piece = text
        low = piece.lower()  # bytes.lower is ASCII-only: offsets stay the same
        n = len(low)
        spans: dict[int, int] = {}
        # One RE2 pass finds every anchor (a DFA over the alternation), then jumps to the
        # next line: about 5x faster than one bytes.find() pass per anchor.
        search = self.cat.anchor_rx.search
        m = search(low, 0)
        while m is not None:
            i = m.start()
            start = low.rfind(b"\n", 0, i) + 1
            end = low.find(b"\n", i)
            if end == -1:
                end = n
            spans[start] = end
            m = search(low, end)
        line_no, pos = first_line, 0
        for start in sorted(spans):
            line_no += piece.count(b"\n", pos, start)
            pos = start
            raw = piece[start : min(spans[start], start + MAX_LINE_BYTES)]
            text = raw.decode("utf-8", "replace").rstrip("\r")

            def before(start: int = start) -> list[str]:
                return _lines_before(piece, start, context)

            self._line(text, line_no, file_index, name, before)
        return False

    # Classifying ---------------------------------------------------------------------------

    def _line(
        self, text: str, line_no: int, file_index: int, name: str, before: Callable[[], list[str]]
    ) -> None:
        event = classify(
            text, self.cat, before=before if self.frame_lookups < MAX_FRAME_LOOKUPS else None
        )
        parsed = event[1] if event else None
        if parsed is not None and parsed.host and parsed.rank is not None:
            self.rank_host.setdefault(parsed.rank, parsed.host)
        if not event or event[0] is None:
            return
        ev = event[0]
        if ev.rule.cause == "by_exception":
            self.frame_lookups += 1
        count = self.per_rule.get(ev.rule.id, 0)
        self.per_rule[ev.rule.id] = count + 1
        if count >= MAX_EVENTS_PER_RULE:
            return
        ev.file_index, ev.file, ev.line_no = file_index, name, line_no
        self.events.append(ev)


_NON_CONTROL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 32 or b == 127))


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


def classify(
    text: str, cat: Catalogue | None = None, before: Callable[[], list[str]] | None = None
) -> tuple[Event | None, Line] | None:
    """The event one line stands for (None for noise), with the parsed line.

    `before` returns the preceding lines (nearest first), used to find the innermost
    traceback frame of a Python exception.
    """
    cat = cat or catalogue_load()
    line = parse_line(text)
    msg = line.message
    rule = _first_rule(cat, msg)
    if rule is None:
        return None, line
    if rule.kind == "ignore":
        return None, line
    cause, tier, detail, action = rule.cause, rule.tier, rule.detail, None
    confidence, gpu = rule.confidence, None
    if cause == "by_xid":
        xm = _XID.search(msg)
        if not xm:
            return None, line
        xid = taxonomy.xid_info(int(xm.group(2)))
        if xid.cause is None:
            return None, line
        cause, tier, gpu = xid.cause, xid.tier, xm.group(1)
        detail = f"Xid {xid.code}: {xid.meaning}"
        action = xid.action.value if xid.action else None
        if xid.tier != "hardware":
            confidence = min(confidence, 0.6)
    elif cause == "by_exception":
        name = _EXC_NAME.match(msg).group(1)  # at_start matched, so this matches too
        if name in EXCEPTIONS_IGNORED:
            return None, line
        detail = name
        library = _innermost_frame(line, before) if before else None
        if library is None:
            cause = taxonomy.EXCEPTION_DEFAULT_CAUSE.get(
                taxonomy.EXCEPTION_ALIAS.get(name, name), "framework_exception"
            )
            confidence = 0.6  # no frame seen: the exception name alone decides
        else:
            cause = "framework_exception" if library else "user_exception"
    if detail is None:
        detail = _DETAIL_NOISE.sub("", msg.strip())[:DETAIL_CHARS]
    if gpu is None:
        bm = _NVRM_BDF.search(msg)
        gm = _GPU_INDEX.search(msg)
        gpu = bm.group(1) if bm else next((g for g in gm.groups() if g), None) if gm else None
    host = line.host
    sm = _SLURM_NODE.search(msg)
    if sm:
        host = next(g for g in sm.groups() if g)
    peer = None
    if rule.blame == "peer" or cause == "ib_link":
        pm = _PEER.search(msg)
        peer = pm.group(1) if pm else None
    stamp = line.stamp
    if stamp is None:
        am = _CANCELLED_AT.search(msg)
        if am:
            stamp = parse_line(am.group(1) + " x").stamp
    lc = _LAST_COMPLETED.search(msg)
    tm = _TIMEOUT_MS.search(msg)
    event = Event(
        file_index=0,
        file="",
        line_no=0,
        text=text.strip()[:EVIDENCE_TEXT_CHARS],
        rule=rule,
        cause=cause,
        tier=tier,
        kind=rule.kind,
        confidence=confidence,
        detail=detail,
        host=host,
        rank=line.rank,
        gpu=gpu,
        peer=peer,
        stamp=stamp,
        is_kernel=line.program == "kernel" or bool(_KERNEL_HINT.search(msg)),
        action=action,
        last_completed=int(lc.group(1)) if lc else None,
        timeout_ms=int(tm.group(1)) if tm else None,
    )
    return event, line


def _innermost_frame(exc: Line, before: Callable[[], list[str]]) -> bool | None:
    """Walk back from an exception line to its innermost non-stdlib frame (same host/rank)."""
    for text in before():
        prev = parse_line(text)
        if (prev.host, prev.rank) != (exc.host, exc.rank):
            continue
        msg = prev.message
        if msg.startswith("Traceback (most recent call last)"):
            return None
        fm = _FRAME.match(msg)
        if fm:
            library = _frame_is_library(fm.group(1))
            if library is not None:
                return library
        elif _EXC_NAME.fullmatch(msg.split(":", 1)[0]) and msg.split(":", 1)[0].endswith(
            ("Error", "Exception")
        ):
            return None  # an earlier exception of a chain: its frames are not ours
    return None


# --- Deciding -------------------------------------------------------------------------------


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


def _loss_events(cat: Catalogue, tails: list[tuple[int, str, int, bytes]]) -> list[Event]:
    """loss_nan from the loss curve at the end of each file: NaN/inf last, or a spike."""
    events = []
    value = re.compile(r"[-+]?(nan|inf|\d*\.?\d+(?:e[-+]?\d+)?)\s*$", re.I)
    for file_index, name, last_line, tail in tails:
        if b"loss" not in tail.lower():
            continue
        lines = tail.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        first = last_line - len(lines) + 1
        series: list[tuple[int, float, str]] = []
        for i, text in enumerate(lines[1:], 1):  # the first tail line may be cut
            m = cat.loss.regex.search(text)
            if not m:
                continue
            vm = value.search(m.group(0))
            if vm:
                series.append((first + i, float(vm.group(0)), text))
        if not series:
            continue
        run = 0
        while run < len(series) and not math.isfinite(series[-1 - run][1]):
            run += 1
        hit, detail, conf = None, None, cat.loss.confidence
        if run:
            hit = series[-run]
            detail = f"loss {hit[1]} at the end of the log"
            conf = max(conf, 0.9)
        elif len(series) >= LOSS_SPIKE_STEPS + 20:
            recent = [v for _, v, _ in series[-LOSS_SPIKE_STEPS:]]
            base = statistics.median(
                v for _, v, _ in series[-LOSS_SPIKE_STEPS - LOSS_BASELINE_STEPS : -LOSS_SPIKE_STEPS]
            )
            if base > 0 and min(recent) > LOSS_SPIKE_FACTOR * base:
                hit = series[-LOSS_SPIKE_STEPS]
                detail = f"loss spike: {hit[1]:g} vs median {base:g} of the previous steps"
        if hit:
            parsed = parse_line(hit[2])
            events.append(
                Event(
                    file_index=file_index,
                    file=name,
                    line_no=hit[0],
                    text=hit[2].strip()[:EVIDENCE_TEXT_CHARS],
                    rule=cat.loss,
                    cause="loss_nan",
                    tier=cat.loss.tier,
                    kind="cause",
                    confidence=conf,
                    detail=detail,
                    host=parsed.host,
                    rank=parsed.rank,
                    stamp=parsed.stamp,
                )
            )
    return events


def _tail_stamps(tails: list[tuple[int, str, int, bytes]]) -> list[Stamp]:
    stamps = []
    for _, _, _, tail in tails:
        for text in tail[-32768:].decode("utf-8", "replace").split("\n")[1:]:
            parsed = parse_line(text)
            if parsed.stamp and parsed.program != "kernel" and not _KERNEL_HINT.search(text):
                stamps.append(parsed.stamp)
    return stamps


def decide(scan: _Scan, job_nodes: Iterable[str] | None = None) -> Diagnosis:
    """Apply the window, coalescing, ordering and blame rules to what a scan found."""
    events = scan.events + _loss_events(scan.cat, scan.tails)
    notes = list(scan.notes)
    stamps = [e.stamp for e in events if e.stamp] + _tail_stamps(scan.tails)
    years = [s[1] for s in stamps if s[1]]
    year = min(years) if years else 2000
    for e in events:
        resolved = _resolve_stamp(e.stamp, year)
        if resolved:
            e.ts, e.ts_style = resolved

    # Window around the failure: the last dated job/scheduler line (not kernel lines, whose
    # clock may run on after the job).
    job_times: dict[str, list[float]] = {}
    for s in [e.stamp for e in events if e.stamp and not e.is_kernel] + _tail_stamps(scan.tails):
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
    best = _pick(events)
    return _diagnosis(best, events, scan, notes)


def _coalesce(events: list[Event]) -> list[Event]:
    """One event per (node, GPU, signature) burst within COALESCE_S (taxonomy step 2)."""
    out: list[Event] = []
    last: dict[tuple, Event] = {}
    for e in events:
        key = (e.host, e.gpu, e.rule.id, e.cause, e.detail, e.rank)
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
        return (0 if e.kind == "cause" else 1, taxonomy.TIER_RANK[e.tier])

    top = min(group(e) for e in events)
    tied = [e for e in events if group(e) == top]
    styles = {e.ts_style for e in tied}
    if len(styles) == 1 and None not in styles:
        return min(tied, key=lambda e: (e.ts, e.seq))
    return min(tied, key=lambda e: e.seq)


def _diagnosis(best: Event, events: list[Event], scan: _Scan, notes: list[str]) -> Diagnosis:
    cause = taxonomy.CAUSES[best.cause]
    node, gpu, rank = best.host, best.gpu, best.rank
    if best.rule.blame == "none":
        node = gpu = rank = None
    elif best.rule.blame == "peer":
        peers = [e.peer for e in events if e.peer and e.tier == best.tier]
        node, gpu, rank = (peers[0] if peers else None), None, None
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
        node = scan.rank_host.get(rank)
    if best.rule.blame == "line" and node is None:
        # "The rank/node that errored first": the earliest event of this cause naming a node.
        named = [e for e in events if e.cause == best.cause and e.host]
        if named and best.cause not in ("nccl_timeout",):
            node = min(named, key=lambda e: e.seq).host
    action = best.action or cause.action.value

    confidence = best.confidence
    rivals = {e.cause for e in events if e.kind == "cause" and e.tier == best.tier} - {best.cause}
    if best.kind == "cause" and rivals:
        confidence *= 0.85
        notes.append("other causes in the same tier: " + ", ".join(sorted(rivals)))
    if sum(e.count for e in events if e.cause == best.cause) > 1:
        confidence += 0.03
    confidence = round(min(confidence, 0.99), 2)

    others = sorted(
        (e for e in events if e is not best), key=lambda e: (taxonomy.TIER_RANK[e.tier], e.seq)
    )
    evidence, seen = [best], {(best.rule.id, best.host, best.cause)}
    for e in others:
        key = (e.rule.id, e.host, e.cause)
        if key not in seen and len(evidence) < EVIDENCE_LINES:
            seen.add(key)
            evidence.append(e)
    detail = best.detail or ""
    if best.cause == "ib_link" and best.peer:
        detail = f"{detail} (peer {best.peer})"
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
        symptoms=tuple(sorted({e.cause for e in events} - {best.cause})),
        bytes_scanned=scan.bytes_total,
        lines_scanned=scan.lines_total,
        notes=tuple(notes),
    )


def _counted(e: Event) -> str:
    return e.text if e.count == 1 else f"{e.text} [x{e.count}]"


def _unknown(scan: _Scan, notes: list[str]) -> Diagnosis:
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


# --- Entry points ---------------------------------------------------------------------------


def diagnose_streams(
    streams: Iterable[tuple[str, BinaryIO]],
    job_nodes: Iterable[str] | None = None,
    catalogue: Catalogue | None = None,
) -> Diagnosis:
    """Diagnose (name, binary stream) pairs: the job log first, then e.g. kernel logs."""
    scan = _Scan(catalogue or catalogue_load())
    for index, (name, stream) in enumerate(streams):
        scan.scan(stream, index, name)
    return decide(scan, job_nodes)


def diagnose_paths(
    log: str | os.PathLike[str],
    kernel_logs: Iterable[str | os.PathLike[str]] = (),
    job_nodes: Iterable[str] | None = None,
) -> Diagnosis:
    """Diagnose log files; raises OSError (naming the file) when one cannot be read."""
    paths = [Path(log), *(Path(p) for p in kernel_logs)]
    handles = []
    try:
        for p in paths:
            if p.is_dir():
                raise IsADirectoryError(f"{p} is a directory, not a log file")
            handles.append((p.name, open(p, "rb")))  # noqa: SIM115 - closed below
        return diagnose_streams(handles, job_nodes)
    finally:
        for _, h in handles:
            h.close()


def diagnose_text(text: str | bytes, kernel_log: str | bytes | None = None, **kw: Any) -> Diagnosis:
    """Diagnose in-memory logs (tests, the LLM hook's replay)."""
    import io

    def raw(t: str | bytes) -> bytes:
        return t.encode("utf-8") if isinstance(t, str) else t

    streams: list[tuple[str, BinaryIO]] = [("log", io.BytesIO(raw(text)))]
    if kernel_log is not None:
        streams.append(("kernel-log", io.BytesIO(raw(kernel_log))))
    return diagnose_streams(streams, **kw)


def grep_patterns(cat: Catalogue | None = None) -> list[str]:
    """Every pattern of the catalogue (for `grep -E -i -f`: the benchmark's baseline)."""
    cat = cat or catalogue_load()
    return [p for r in cat.rules if r.kind != "ignore" for p in r.patterns]


def iter_rules(cat: Catalogue | None = None) -> Iterator[Rule]:
    yield from (cat or catalogue_load()).rules
