"""Plotly figures of the recovery page, built server-side (plain dicts for `json_script`) and
drawn by the vendored plotly.js, like webapp/failures/figures.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import plotly.graph_objects as go

from webapp.core.charts import (
    ERROR_COLOUR,
    NO_DATA_COLOUR,
    bucket_axis,
    bucket_bars,
    figure_json,
)
from webapp.recovery.choices import ActionStatus

# One colour per action status: done green, failed red (the chart theme's error colour),
# waiting amber, never run grey.
STATUS_COLOURS: dict[str, str] = {
    ActionStatus.SUCCEEDED: "#2ca02c",
    ActionStatus.FAILED: ERROR_COLOUR,
    ActionStatus.RUNNING: "#1f77b4",
    ActionStatus.READY: "#17becf",
    ActionStatus.AWAITING_APPROVAL: "#ff7f0e",
    ActionStatus.REJECTED: "#8c564b",
    ActionStatus.CANCELLED: "#7f7f7f",
    ActionStatus.DRY_RUN: NO_DATA_COLOUR,
}
PHASE_LABELS = {
    "detect": "detect",
    "diagnose": "diagnose",
    "act": "act",
    "running_again": "running again",
}


def actions_figure(rows: Sequence[tuple[datetime, str, str, str, int]], bucket: str) -> dict:
    """Actions created per hour or day, stacked by status; the hover names the kinds."""
    labels = dict(ActionStatus.choices)
    fig = go.Figure()
    when = "%{x|%b %-d}" if bucket == "day" else "%{x|%b %-d %H:%M}"
    for status, colour in STATUS_COLOURS.items():
        per: dict[datetime, dict[str, int]] = {}
        for b, kind, s, _executor, n in rows:
            if s == status:
                kinds = per.setdefault(b, {})
                kinds[kind] = kinds.get(kind, 0) + n
        if not per:
            continue
        xs = sorted(per)
        fig.add_trace(
            go.Bar(
                name=labels[status],
                x=[b.isoformat() for b in xs],
                y=[sum(per[b].values()) for b in xs],
                marker={"color": colour},
                customdata=[[", ".join(f"{k} {n}" for k, n in sorted(per[b].items()))] for b in xs],
                **bucket_bars(bucket),
                hovertemplate=when
                + "<br>%{y} "
                + labels[status].lower()
                + ": %{customdata[0]}<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        xaxis=bucket_axis(f"time (UTC), per {bucket}", [r[0] for r in rows], bucket),
        yaxis={"title": {"text": "actions"}, "rangemode": "tozero"},
        showlegend=True,
    )
    return figure_json(fig, 300)


def phases_figure(phases: dict[str, dict]) -> dict:
    """Median and p95 seconds of each phase of recovery (horizontal bars)."""
    names = [PHASE_LABELS[p] for p in phases]
    fig = go.Figure()
    for key, label, colour in (("median_s", "median", "#2458b3"), ("p95_s", "p95", "#9fb6e0")):
        fig.add_trace(
            go.Bar(
                name=label,
                orientation="h",
                y=names,
                x=[phases[p][key] or 0 for p in phases],
                customdata=[[phases[p]["n"]] for p in phases],
                marker={"color": colour},
                hovertemplate="%{y} " + label + ": %{x:.1f} s (%{customdata[0]} failures)"
                "<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        xaxis={"title": {"text": "seconds"}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        showlegend=True,
    )
    return figure_json(fig, 260)
