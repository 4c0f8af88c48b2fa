"""The one time-window type: a cluster and [since, until), either end open.

Characterization windows are often open (all jobs up to now); reliability and energy windows
are closed (`hours` needs both ends). Core imports no app, so `cluster` is whatever the caller
holds (a fleet Cluster) and only its `id` is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Window:
    cluster: Any
    since: datetime | None = None
    until: datetime | None = None

    @property
    def hours(self) -> float:
        """Length in hours (at least one second's worth); both ends must be set."""
        if self.since is None or self.until is None:
            raise ValueError("an open window has no length")
        return max((self.until - self.since).total_seconds(), 1.0) / 3600

    def where(self, column: str = "submit_at") -> tuple[str, list]:
        """SQL (and its parameters) for rows of the cluster whose `column` is in the window."""
        sql, params = "cluster_id = %s", [self.cluster.id]
        if self.since is not None:
            sql, params = sql + f" AND {column} >= %s", [*params, self.since]
        if self.until is not None:
            sql, params = sql + f" AND {column} < %s", [*params, self.until]
        return sql, params


def when_parse(text: str, name: str) -> datetime:
    """An ISO 8601 date or date-time ("2026-03-01", "2026-03-01T08:00:00+08:00"); naive
    values are UTC. Raises ValueError naming the parameter."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{name}: {text!r} is not an ISO 8601 date or date-time (e.g. 2026-03-01)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def window_parse(cluster: Any, since: str | None, until: str | None) -> Window:
    """A Window from the `since` / `until` texts (empty = unbounded); ValueError when bad."""
    start = when_parse(since, "since") if since else None
    end = when_parse(until, "until") if until else None
    if start and end and start >= end:
        raise ValueError(f"since ({start.isoformat()}) must be before until ({end.isoformat()})")
    return Window(cluster, start, end)
