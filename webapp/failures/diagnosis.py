"""Deterministic failure diagnosis: logs in, one Diagnosis out. Plain functions, no Django.

Pipeline (failure-taxonomy.md "Ordering"):
1. scan: read each file in binary chunks; a cheap literal prefilter (one RE2 pass over the
   chunk for the anchors of rules.yaml, ASCII case folded) yields the few lines worth parsing;
   only those are decoded (UTF-8, errors replaced), stripped of their prefixes and matched
   against the ordered rules (first match wins); a line repeated verbatim is parsed once. Kernel, scheduler and rank lines go through
   the same code whichever file they come from, so a combined capture diagnoses exactly like a
   job log plus `--kernel-log`.
2. decide: keep the events inside the window [failure - 15 min, failure + 2 min], coalesce
   repeats of one (node, GPU, signature) within 5 s, take the highest-priority tier and the
   earliest event in it (causes before symptoms), blame its node/GPU (or the rank with the
   lowest "last completed NCCL work", or the peer host named in a socket error).

Files are streamed: memory stays bounded (a chunk, a 256 KiB tail, capped events and parsed
lines) whatever the size; binary chunks are skipped; empty or binary input gets `unknown` with a reason.
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
from typing import Any, BinaryIO, NamedTuple

import numpy as np
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
# Parsed lines remembered per diagnosis for verbatim repeats (then all forgotten at once);
# only short ones, so that the memory stays small (a few MB) whatever the log.
SEEN_LINES = 2048
SEEN_LINE_CHARS = 512
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
    line_rx: Any  # re2 pattern: a whole line that contains an anchor (see _line_pattern)
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
    anchors = tuple(str(a).lower() for a in data["anchors"])
    bad = [a for a in anchors if not a.isascii() or "\n" in a or not a]
    if bad:
        # The scan folds ASCII case only (as bytes.lower() does); a line break never matches.
        raise RuleError(f"anchors must be non-empty ASCII text on one line: {bad[0]!r}")
    return Catalogue(
        anchors=tuple(a.encode() for a in anchors),
        line_rx=_line_pattern(anchors),
        rules=rules,
        line_rules=line_rules,
        loss=loss[0],
    )


def _line_pattern(anchors: Iterable[str]) -> Any:
    """RE2 pattern whose matches are the whole lines (without the newline) holding an anchor.

    One pass over a chunk yields the lines worth parsing, in order, with no Python work between
    them. Latin-1 mode makes every byte but \\n a line byte (invalid UTF-8 included); case
    folding in that mode is ASCII-only for ASCII anchors, as bytes.lower() is.
    """
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.case_sensitive = False
    alternation = b"|".join(re.escape(a.encode()) for a in anchors)
    return re2.compile(b"[^\\n]*(?:" + alternation + b")[^\\n]*", options)


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
_TS_ISO = (
    r"\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(Z|[+-]\d{2}:?\d{2})?\]?[ :|]\s*"
)
_MONTH_NAME = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
# "node-12 kernel: " after a journal/syslog timestamp: host then program.
_HOST_PROGRAM = re.compile(
    r"([A-Za-z0-9][\w.-]*) (kernel|slurm\w*|srun|sbatch|systemd|nv-fabricmanager|[\w.-]+\[\d+\]): "
)
_NOT_HOSTS = re.compile(r"(ib|ibp|eth|en|em|bond|nvme|sd|loop|md|dm|veth|lo|mlx)\d", re.I)
# The prefixes parse_line strips, in the order they are tried at the start of what is left
# (the first that matches wins): (name, pattern, the ASCII characters a match can start with,
# whether its first group must be a host name). A host that is really an interface (ib0) or
# localhost fails its branch: the branches after it are tried.
_PREFIXES: tuple[tuple[str, str, str, bool], ...] = (
    ("pri", r"<\d{1,3}>", "<", False),
    ("iso", _TS_ISO, r"[\[0-9]", False),
    (
        "dmesg_t",
        r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) "
        r"(\d{4})\]\s*",
        r"\[",
        False,
    ),
    (
        "syslog",
        _MONTH_NAME + r" +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)? ",
        "[JFMASOND]",
        False,
    ),
    ("uptime", r"\[\s*\d+\.\d+\]\s*", r"\[", False),
    ("rank", r"\[[Rr]ank ?(\d+)\]:?\s*", r"\[", False),
    (
        "c10",
        r"\[[EWIF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.\d+ (?:\d+ )?[\w./-]+:\d+\]\s*",
        r"\[",
        False,
    ),
    ("c10_short", r"\[[EWIF] [\w./-]+:\d+\]\s*", r"\[", False),
    ("host_program", _HOST_PROGRAM.pattern, "[A-Za-z0-9]", True),
    (
        "program",
        r"(kernel|slurmstepd|slurmd|slurmctld|srun|sbatch|salloc)(?:\[\d+\])?: ",
        "[ks]",
        False,
    ),
    ("host_pid_tid", r"([A-Za-z][\w.-]*):(\d+):(\d+) ", "[A-Za-z]", True),
    ("host", r"([a-z][a-z0-9.-]*[0-9][a-z0-9.-]*|[a-z][a-z0-9]*-[a-z0-9.-]+): ", "[a-z]", True),
    ("task", r"(\d{1,5}): ", "[0-9]", False),
)


@functools.cache
def _alternation(
    branches: tuple[int, ...],
) -> tuple[re.Pattern[str], dict[int, tuple[int, int]], tuple[int, ...]]:
    """The branches as one pattern, {outer group: (branch, its first group)}, the branches.

    Python's re tries alternatives left to right and keeps the first that matches, so one
    match() answers what a loop of match() calls over the branches would, several times faster.
    """
    parts, branch_at, group = [], {}, 1
    for k in branches:
        pattern = _PREFIXES[k][1]
        parts.append(f"({pattern})")
        branch_at[group] = (k, group + 1)
        group += 1 + re.compile(pattern).groups
    return re.compile("|".join(parts) or "(?!)"), branch_at, branches


# Only the branches that can start with a line's first character are tried (a character
# outside ASCII, a Unicode digit say, tries them all).
_PREFIX_FOR: dict[str, tuple[re.Pattern[str], dict[int, tuple[int, int]], tuple[int, ...]]] = {
    c: _alternation(tuple(k for k, p in enumerate(_PREFIXES) if re.fullmatch(p[2], c)))
    for c in map(chr, range(128))
}
_PREFIX_ANY = _alternation(tuple(range(len(_PREFIXES))))
_RANK_IN_MSG = re.compile(r"\[(?:PG \d+ )?Rank (\d+)\]|\bRank (\d+):", re.I)

# A time without a year ("May 07 03:12:44", torch's "E0507 03:12:44"): resolved after the scan
# with the year of the log's dated lines, so the answer never depends on today's date.
Stamp = tuple[str, int, int, int, int, int, int, float]  # (style, y/0, mon, d, h, m, s, frac)


class Line(NamedTuple):  # a tuple: immutable, and cheap to build for every parsed line
    text: str
    message: str
    host: str | None = None
    rank: int | None = None
    program: str | None = None
    stamp: Stamp | None = None


def _prefix(rest: str) -> tuple[str, re.Match[str], int] | None:
    """The first prefix at the start of `rest`: (branch name, match, index of its group 1)."""
    rx, branch_at, branches = _PREFIX_FOR.get(rest[:1], _PREFIX_ANY)
    while branches:
        m = rx.match(rest)
        if m is None:
            return None
        k, g = branch_at[m.lastindex]
        name, _, _, needs_host = _PREFIXES[k]
        if needs_host and not _host(m.group(g)):
            rx, branch_at, branches = _alternation(branches[branches.index(k) + 1 :])
            continue
        return name, m, g
    return None


def parse_line(text: str) -> Line:
    """Strip the usual prefixes (timestamps, host, [rankN]:, srun labels, program names)."""
    rest = text.strip()
    host = rank = program = stamp = None
    for _ in range(10):
        found = _prefix(rest)
        if found is None:
            break
        kind, m, g = found
        end = m.end()
        if kind == "host_pid_tid":
            host = host or m.group(g)
            rest = rest[end:]
        elif kind == "iso" or kind == "syslog":
            if kind == "iso":
                y, mo, d, hh, mi, ss, frac, tz = m.group(
                    g, g + 1, g + 2, g + 3, g + 4, g + 5, g + 6, g + 7
                )
                style = "aware" if tz else "naive"
                secs = float("0." + frac) if frac else 0.0
                if tz and tz != "Z":
                    sign = 1 if tz[0] == "+" else -1
                    off = int(tz[1:3]) * 3600 + int(tz[-2:]) * 60
                    secs -= sign * off  # seconds east of UTC: subtract to get UTC
                stamp = stamp or (style, int(y), int(mo), int(d), int(hh), int(mi), int(ss), secs)
            else:
                mon, d, hh, mi, ss = m.group(g, g + 1, g + 2, g + 3, g + 4)
                month = _MONTHS[mon.lower()]
                stamp = stamp or ("naive", 0, month, int(d), int(hh), int(mi), int(ss), 0.0)
            rest = rest[end:]
            hm = _HOST_PROGRAM.match(rest)
            if hm:
                host = host or _host(hm.group(1))
                program = program or hm.group(2).split("[")[0]
                rest = rest[hm.end() :]
        elif kind == "rank" or kind == "task":
            rank = int(m.group(g)) if rank is None else rank
            rest = rest[end:].lstrip()
        elif kind == "host":
            host = host or m.group(g)
            rest = rest[end:].lstrip()
        elif kind == "host_program":
            host = host or m.group(g)
            program = program or m.group(g + 1).split("[")[0]
            rest = rest[end:]
        elif kind == "program":
            program = program or m.group(g)
            rest = rest[end:]
        elif kind == "uptime":
            program = program or "kernel"
            rest = rest[end:]
        elif kind == "c10":
            mo, d, hh, mi, ss = (int(x) for x in m.group(g, g + 1, g + 2, g + 3, g + 4))
            stamp = stamp or ("naive", 0, mo, d, hh, mi, ss, 0.0)
            rest = rest[end:]
        elif kind == "dmesg_t":
            mon, d, hh, mi, ss, y = m.group(g, g + 1, g + 2, g + 3, g + 4, g + 5)
            month = _MONTHS.get(mon.lower(), 1)
            stamp = stamp or ("naive", int(y), month, int(d), int(hh), int(mi), int(ss), 0.0)
            rest = rest[end:]
        else:  # pri, c10_short: nothing to keep
            rest = rest[end:]
    # "rank" in the lowercased message is necessary for a match (a cheap test first: the
    # search has no literal to skip ahead with and most messages name no rank).
    if rank is None and "rank" in rest.lower():
        m = _RANK_IN_MSG.search(rest)
        if m:
            rank = int(m.group(1) or m.group(2))
    return Line(text, rest, host, rank, program, stamp)


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
# The characters outside ASCII that re.IGNORECASE matches with an ASCII letter (all of them:
# found by trying every code point). Folded, then lowercased, a text holds an ASCII literal
# exactly when a case-insensitive search for that literal would find it.
_CASE_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}


def _folded(text: str) -> str:
    return (text if text.isascii() else text.translate(_CASE_FOLD)).lower()


@dataclass(frozen=True)
class _Find:
    """A case-insensitive pattern, and literals (folded) one of which every match contains.

    re has no fast path for an IGNORECASE search: over a long line one costs 3-40 us, the `in`
    tests on the folded line well under 1, so the search runs only where it can match.
    """

    rx: re.Pattern[str]
    needles: tuple[str, ...]

    def search(self, text: str, folded: str) -> re.Match[str] | None:
        return self.rx.search(text) if any(n in folded for n in self.needles) else None


_NVRM_BDF = _Find(
    re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F:.]+)", re.I),
    ("nvrm: ",),
)
_EXC_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*([A-Za-z_][A-Za-z0-9_]*)")
_PEER = _Find(
    re.compile(
        r"(?:remote peer|from peer|Call to recv from|connect to|peer) \(?\[?([A-Za-z0-9][\w.:-]*?)\]?(?:<\d+>|:\d+|,|\)|\s|$)",
        re.I,
    ),
    ("peer", "call to recv from", "connect to"),
)
_SLURM_NODE = _Find(
    re.compile(
        r"Node failure on ([\w.-]+)|srun: error: ([\w.-]+): task|Nodes? ([\w.-]+) not responding|"
        r"^error: ([\w.-]+): task|, node: ([\w.-]+)",
        re.I,
    ),
    ("node", "error: "),
)
_GPU_INDEX = _Find(
    re.compile(r"\(GPU (\d+);|GPU (\d+) has a total capacity|Device: (\d+)|cuda:(\d+)", re.I),
    ("gpu ", "device: ", "cuda:"),
)
_LAST_COMPLETED = _Find(
    re.compile(r"last completed NCCL work: (-?\d+)", re.I), ("last completed nccl work: ",)
)
_TIMEOUT_MS = _Find(re.compile(r"Timeout\(ms\)=(\d+)", re.I), ("timeout(ms)=",))
_CANCELLED_AT = re.compile(r"CANCELLED AT (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})")
# Location noise at the start of a message, dropped from the detail: Slurm's "error: ",
# NCCL's "[2] transport/net_ib.cc:1712 NCCL WARN ", torch's "[E socket.cpp:957] ".
_DETAIL_NOISE = re.compile(
    r"^(?:error: |\[\d+\] (?:[\w./-]+:\d+ )?NCCL (?:WARN|INFO) |\[[EWI] [\w./-]+:\d+\] )+"
)
_FRAME = re.compile(r'File "([^"]+)", line \d+')
# Kernel messages that reach a job log without their "kernel:" prefix (folded).
_KERNEL_HINTS = (
    "nvrm:",
    "mlx5_core",
    "lost carrier",
    "out of memory: killed",
    "blocked for more than",
    "ext4-fs",
    "memory cgroup",
)


def _kernel_hint(folded: str) -> bool:
    return any(hint in folded for hint in _KERNEL_HINTS)


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
        # Lines already parsed, with the rule their message matched: logs repeat lines
        # verbatim (retries, per-step warnings), and parsing is most of a line's cost.
        self.seen: dict[str, tuple[Line, Rule | None]] = {}

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
        self.lines_total += line_no - 1
        self.tails.append((file_index, name, line_no - 1, tail))

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
        for start, stop in _spans(cat.line_rx, piece, end):
            text = piece[start : min(stop, start + MAX_LINE_BYTES)].decode("utf-8", "replace")
            text = text.rstrip("\r")
            known = seen.get(text)
            if known is None:
                line = parse_line(text)
                known = (line, _first_rule(cat, line.message))
                if len(text) <= SEEN_LINE_CHARS:
                    if len(seen) >= SEEN_LINES:
                        seen.clear()
                    seen[text] = known
            line, rule = known
            if line.host and line.rank is not None:
                rank_host.setdefault(line.rank, line.host)
            if rule is None or rule.kind == "ignore":
                continue
            # Lines are numbered only where an event may be made, and counted in one pass.
            line_no += _newlines(piece, counted, start)
            counted = start
            self._line(text, line, rule, line_no, file_index, name, piece, start, context)
        return False, line_no - first_line + _newlines(piece, counted, end)

    # Classifying ---------------------------------------------------------------------------

    def _line(
        self,
        text: str,
        line: Line,
        rule: Rule,
        line_no: int,
        file_index: int,
        name: str,
        piece: bytes,
        start: int,
        context: bytes,
    ) -> None:
        """Record the event of a line that `rule` (not an ignore rule) matched."""
        count = self.per_rule.get(rule.id, 0)
        if count >= MAX_EVENTS_PER_RULE and rule.cause not in ("by_xid", "by_exception"):
            # Past the cap an event would be dropped: skip building it (a rule that always
            # yields an event counts the line as building it would).
            self.per_rule[rule.id] = count + 1
            return
        before = None
        if rule.cause == "by_exception" and self.frame_lookups < MAX_FRAME_LOOKUPS:
            before = functools.partial(_lines_before, piece, start, context)
        ev = _event(text, line, rule, before)
        if ev is None:
            return
        if rule.cause == "by_exception":
            self.frame_lookups += 1
        self.per_rule[rule.id] = count + 1
        if count >= MAX_EVENTS_PER_RULE:
            return
        ev.file_index, ev.file, ev.line_no = file_index, name, line_no
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
    rule = _first_rule(cat, line.message)
    if rule is None or rule.kind == "ignore":
        return None, line
    return _event(text, line, rule, before), line


def _event(
    text: str, line: Line, rule: Rule, before: Callable[[], list[str]] | None
) -> Event | None:
    """The event of a line that `rule` (not an ignore rule) matched; None if it is noise."""
    msg = line.message
    cause, tier, detail, action = rule.cause, rule.tier, rule.detail, None
    confidence, gpu = rule.confidence, None
    if cause == "by_xid":
        xm = _XID.search(msg)
        if not xm:
            return None
        xid = taxonomy.xid_info(int(xm.group(2)))
        if xid.cause is None:
            return None
        cause, tier, gpu = xid.cause, xid.tier, xm.group(1)
        detail = f"Xid {xid.code}: {xid.meaning}"
        action = xid.action.value if xid.action else None
        if xid.tier != "hardware":
            confidence = min(confidence, 0.6)
    elif cause == "by_exception":
        name = _EXC_NAME.match(msg).group(1)  # at_start matched, so this matches too
        if name in EXCEPTIONS_IGNORED:
            return None
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
    folded = _folded(msg)
    if gpu is None:
        bm = _NVRM_BDF.search(msg, folded)
        gm = _GPU_INDEX.search(msg, folded)
        gpu = bm.group(1) if bm else next((g for g in gm.groups() if g), None) if gm else None
    host = line.host
    sm = _SLURM_NODE.search(msg, folded)
    if sm:
        host = next(g for g in sm.groups() if g)
    peer = None
    if rule.blame == "peer" or cause == "ib_link":
        pm = _PEER.search(msg, folded)
        peer = pm.group(1) if pm else None
    stamp = line.stamp
    if stamp is None:
        am = _CANCELLED_AT.search(msg)
        if am:
            stamp = parse_line(am.group(1) + " x").stamp
    lc = _LAST_COMPLETED.search(msg, folded)
    tm = _TIMEOUT_MS.search(msg, folded)
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
        is_kernel=line.program == "kernel" or _kernel_hint(folded),
        action=action,
        last_completed=int(lc.group(1)) if lc else None,
        timeout_ms=int(tm.group(1)) if tm else None,
    )
    return event


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
        # The checks below read at most the last LOSS_SPIKE_STEPS + LOSS_BASELINE_STEPS values
        # and the run of non-finite ones at the end: read the lines backwards until both are
        # known (the first tail line may be cut, so it never counts).
        series: list[tuple[int, float, str]] = []
        finite = False
        for i in range(len(lines) - 1, 0, -1):
            m = cat.loss.regex.search(lines[i])
            vm = value.search(m.group(0)) if m else None
            if vm:
                series.append((first + i, float(vm.group(0)), lines[i]))
                finite = finite or math.isfinite(series[-1][1])
                if finite and len(series) >= LOSS_SPIKE_STEPS + LOSS_BASELINE_STEPS:
                    break
        series.reverse()
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
            if parsed.stamp and parsed.program != "kernel" and not _kernel_hint(_folded(text)):
                stamps.append(parsed.stamp)
    return stamps


def decide(scan: _Scan, job_nodes: Iterable[str] | None = None) -> Diagnosis:
    """Apply the window, coalescing, ordering and blame rules to what a scan found."""
    events = scan.events + _loss_events(scan.cat, scan.tails)
    notes = list(scan.notes)
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
