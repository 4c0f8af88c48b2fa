"""The shape of a catalog table (Member, Table) and how it becomes rules.yaml patterns and
prefilter anchors; the tables themselves are in the families_* modules, registered in families.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Member:
    symbol: str = ""  # E-name or enum name, matched as a whole word ("" if none)
    text: str = ""  # the catalog's text for it, matched as written ("" if none)
    # Patterns to use instead of the text where the text alone is too common (context needed).
    patterns: tuple[str, ...] = ()
    # Literals (lowercased) every line of `patterns` contains: the prefilter's anchors.
    anchors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    id: str
    source: str  # the catalog: a public URL, and what of it is encoded
    members: tuple[Member, ...]
    examples: tuple[str, ...] = field(default=())

    def patterns(self) -> list[str]:
        out: list[str] = []
        for m in self.members:
            if m.symbol:
                out.append(f"(^|[^A-Za-z0-9_]){re.escape(m.symbol)}([^A-Za-z0-9_]|$)")
            if m.text:
                out.append(_escape(m.text))
            out.extend(m.patterns)
        return out

    def anchors(self) -> list[str]:
        out: list[str] = []
        for m in self.members:
            out.extend(a.lower() for a in (m.symbol, m.text) if a)
            out.extend(m.anchors)
        return out


def _escape(text: str) -> str:
    """`text` as a pattern both Python's re and grep -E read literally."""
    return re.sub(r"([][.^$*+?(){}|\\/])", r"\\\1", text)
