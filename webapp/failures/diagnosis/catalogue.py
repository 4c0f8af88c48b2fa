"""The rule catalogue (rules.yaml): validated, compiled, and the first rule a message matches.

A rule file's text becomes a `Catalogue`: its anchors (the literal prefilter the scan runs
first, see scan.py) and its ordered rules, each with its patterns compiled once. The first
rule whose pattern matches a line's message decides what that line is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2
import yaml

from webapp.failures import taxonomy
from webapp.failures.diagnosis.families import TABLES

RULES_PATH = Path(__file__).resolve().parent.parent / "rules.yaml"


class RuleError(ValueError):
    """rules.yaml is malformed (names the rule and the field)."""


@dataclass(frozen=True)
class Rule:
    id: str
    # a taxonomy cause, "by_xid", "by_exception", "by_exit" or "by_state" (exits.py decides)
    cause: str
    kind: str  # cause | symptom | outcome | ignore
    tier: str  # a taxonomy tier or "by_xid"
    patterns: tuple[str, ...]
    # RE2 (google-re2), not re: a rule's ".*" or two stars in a row make re's search
    # quadratic in the line's length, and a job chooses its lines; RE2's is linear.
    regex: Any
    # (literal every match must contain, lowercased, or "" if none; compiled pattern) pairs:
    # an `in` test on the lowercased message skips most patterns before any regex runs.
    checks: tuple[tuple[str, Any], ...]
    at_start: bool
    blame: str  # line | peer | none
    confidence: float
    detail: str | None
    per_line: bool
    # The event counts only where the log ends in it (within LAST_ONLY_LINES of its file's
    # end): a retry the run outlived explains nothing (rules.yaml tracker-retry).
    last_only: bool
    source: str
    examples: tuple[str, ...]
    tables: tuple[str, ...] = ()  # the catalogs of families.py whose members it matches
    # The event decides only a log in which no other event does (rules.yaml `alone_only`): a
    # line a job prints and goes on after (a shell's "command not found").
    alone_only: bool = False


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key, compared cheaply
class Catalogue:
    anchors: tuple[bytes, ...]
    rules: tuple[Rule, ...]
    line_rules: tuple[Rule, ...]
    loss: Rule


KINDS = ("cause", "symptom", "outcome", "ignore")
# A rule with one of these causes defers to a table: the Xid table (taxonomy.XIDS), the
# innermost traceback frame, the exit table (exits.SIGNALS).
DEFERRED_CAUSES = ("by_xid", "by_exception", "by_exit", "by_state")
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

    cause = need("cause", lambda v: v in taxonomy.CAUSES or v in DEFERRED_CAUSES, "a cause")
    kind = need("kind", lambda v: v in KINDS, "one of " + ", ".join(KINDS))
    tier = need("tier", lambda v: v in taxonomy.TIER_RANK or v == "by_xid", "a tier")
    tables = _tables(raw)
    examples = list(raw.get("examples") or ())
    source = str(raw.get("source", ""))
    if tables:
        # A catalog's members (families.py) join the rule's own patterns and examples.
        raw = {**raw, "patterns": list(raw.get("patterns") or [])}
        for table in tables:
            raw["patterns"].extend(table.patterns())
            examples.extend(table.examples)
            source += f"; table {table.id}: {table.source}"
    patterns = need("patterns", lambda v: isinstance(v, list) and v, "a non-empty list")
    blame = need("blame", lambda v: v in BLAMES, "one of " + ", ".join(BLAMES))
    confidence = need("confidence", lambda v: isinstance(v, int | float) and 0 <= v <= 1, "0..1")
    try:
        for p in patterns:
            re.compile(p)  # re's message names the position of a syntax error
        regex = _re2("|".join(f"(?:{p})" for p in patterns))
        checks = tuple((required_literal(p), _re2(p)) for p in patterns)
    except (re.error, re2.error) as exc:
        raise RuleError(f"rule {rid}: bad pattern: {exc}") from exc
    return Rule(
        id=rid,
        cause=cause,
        kind=kind,
        tier=tier,
        patterns=tuple(patterns),
        regex=regex,
        checks=checks,
        at_start=bool(raw.get("at_start", False)),
        blame=blame,
        confidence=float(confidence),
        detail=raw.get("detail"),
        per_line=bool(raw.get("per_line", True)),
        last_only=bool(raw.get("last_only", False)),
        source=source,
        examples=tuple(examples),
        tables=tuple(t.id for t in tables),
        alone_only=bool(raw.get("alone_only", False)),
    )


def _tables(raw: dict[str, Any]) -> list[Any]:
    """The catalogs (families.TABLES) a rule names in `table` (one id or a list)."""
    names = raw.get("table") or []
    names = [names] if isinstance(names, str) else names
    unknown = [n for n in names if n not in TABLES]
    if unknown or not isinstance(names, list):
        raise RuleError(
            f"rule {raw.get('id')}: table must name tables of families.py, got {names!r}"
        )
    return [TABLES[n] for n in names]


def _re2(pattern: str) -> Any:
    """`pattern` compiled by RE2, case-insensitive (the rules' flag)."""
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # the RuleError says what is wrong
    return re2.compile(pattern, options)


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


def _matches(rule: Rule, msg: str, low: str) -> Any:
    for literal, regex in rule.checks:
        if literal and literal not in low:
            continue
        m = regex.match(msg) if rule.at_start else regex.search(msg)
        if m:
            return m
    return None


@functools.lru_cache(maxsize=8192)
def first_rule(cat: Catalogue, msg: str) -> Rule | None:
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
    not_text = [a for a in data["anchors"] if not isinstance(a, str)]
    if not_text:
        # An unquoted "host: x" in YAML is a mapping, not the text "host: x": quote it.
        raise RuleError(f"anchors must be strings (quote ones with ': '): {not_text[0]!r}")
    # Every catalog a rule reads brings the literals its members' lines carry.
    table_anchors = [a for r in rules for t in r.tables for a in TABLES[t].anchors()]
    anchors = tuple(dict.fromkeys(a.lower() for a in [*data["anchors"], *table_anchors]))
    bad = [a for a in anchors if not (a.isascii() or a.upper() == a) or "\n" in a or not a]
    if bad:
        # The scan folds ASCII case only (as bytes.lower() does): text outside ASCII is an
        # anchor only where it has no case (a shell's localised "已杀死"). A line break never
        # matches.
        raise RuleError(
            f"anchors must be non-empty text on one line, ASCII or without case: {bad[0]!r}"
        )
    return Catalogue(
        anchors=tuple(a.encode() for a in anchors),
        rules=rules,
        line_rules=line_rules,
        loss=loss[0],
    )


@functools.cache
def catalogue_load(path: str = str(RULES_PATH)) -> Catalogue:
    """The rule catalogue (parsed once per process)."""
    return catalogue_parse(Path(path).read_text(encoding="utf-8"))


def grep_patterns(cat: Catalogue | None = None) -> list[str]:
    """Every pattern of the catalogue (for `grep -E -i -f`: the benchmark's baseline)."""
    cat = cat or catalogue_load()
    return [p for r in cat.rules if r.kind != "ignore" for p in r.patterns]
