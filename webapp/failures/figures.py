"""Plotly figures of the failure pages, built server-side (plain dicts for `json_script`) and
drawn by the vendored plotly.js, like webapp/telemetry/figures.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from webapp.core.charts import figure_json, instant_axis, plain
from webapp.failures import taxonomy
from webapp.failures.models import FailureEvent, GpuErrorEvent

# One colour per category on every failure figure (infrastructure red: it costs the most GPU
# time, Acme Table 3).
CATEGORY_COLOURS: dict[str, str] = {
    taxonomy.Category.INFRASTRUCTURE.value: "#d62728",
    taxonomy.Category.FRAMEWORK.value: "#ff7f0e",
    taxonomy.Category.SCRIPT.value: "#2458b3",
    taxonomy.Category.OUTCOME.value: "#7f7f7f",
    taxonomy.Category.UNKNOWN.value: "#9467bd",
    "performance": "#17becf",  # stragglers: not a failure label
    "": "#b9bec7",  # pending diagnosis
}


def _colour_key(f: FailureEvent) -> str:
    return f.category or ("performance" if f.kind == "performance" else "")


def timeline_figure(rows: Sequence[tuple[FailureEvent, str, str]]) -> dict:
    """Failures over time, one lane per node or job, coloured by category.

    rows: (failure, lane, url of its page). The url rides in customdata for click-through.
    """
    lanes = sorted({plain(lane) for _, lane, _ in rows})
    fig = go.Figure()
    for category, colour in CATEGORY_COLOURS.items():
        mine = [r for r in rows if _colour_key(r[0]) == category]
        if not mine:
            continue
        fig.add_trace(
            go.Scatter(
                name=category or "pending",
                x=[f.occurred_at.isoformat() for f, _, _ in mine],
                y=[plain(lane) for _, lane, _ in mine],
                mode="markers",
                marker={"color": colour, "size": 12, "symbol": "diamond", "line": {"width": 0}},
                customdata=[
                    [
                        url,
                        f.cause or ("straggler" if f.kind == "performance" else "pending"),
                        f.kind,
                    ]
                    for f, _, url in mine
                ],
                hovertemplate="%{x}<br>%{y}<br>%{customdata[1]} (%{customdata[2]})"
                "<extra>click for the diagnosis</extra>",
            )
        )
    fig.update_layout(
        xaxis=instant_axis("time (UTC)", [f.occurred_at for f, _, _ in rows]),
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": lanes[::-1],
            "automargin": True,
        },
        hovermode="closest",
        showlegend=True,
    )
    return figure_json(fig, 120 + 28 * max(len(lanes), 4))


def xid_history_figure(
    events: Sequence[GpuErrorEvent], since: datetime | None = None, until: datetime | None = None
) -> dict:
    """The node's GPU errors over time: one row per GPU, the Xid code as the label."""
    fig = go.Figure()
    by_kind: dict[str, list[GpuErrorEvent]] = {}
    for e in events:
        by_kind.setdefault(f"Xid {e.xid}" if e.xid else e.kind, []).append(e)
    for label, es in sorted(by_kind.items()):
        fig.add_trace(
            go.Scatter(
                name=label,
                x=[e.ts.isoformat() for e in es],
                y=[f"GPU {e.gpu_index}" if e.gpu_index is not None else "node" for e in es],
                mode="markers",
                marker={"size": 11},
                text=[taxonomy.xid_info(e.xid).meaning if e.xid else e.kind for e in es],
                hovertemplate="%{x}<br>%{y}: " + label + " %{text}<extra></extra>",
            )
        )
    xaxis: dict = {"title": {"text": "time (UTC)"}, "type": "date"}
    if since and until:
        xaxis["range"] = [since.isoformat(), until.isoformat()]
    fig.update_layout(xaxis=xaxis, yaxis={"type": "category", "automargin": True}, showlegend=True)
    return figure_json(fig, 260)


def lost_by_cause_figure(rows: Sequence[Any]) -> dict:
    """GPU-hours lost per cause, coloured by category (the paper's Table 3 as bars)."""
    fig = go.Figure()
    for category, colour in CATEGORY_COLOURS.items():
        mine = [r for r in rows if r.category == category]
        if not mine:
            continue
        fig.add_trace(
            go.Bar(
                name=category,
                x=[r.cause for r in mine],
                y=[r.gpu_hours for r in mine],
                marker_color=colour,
                customdata=[r.jobs for r in mine],
                hovertemplate="%{x}: %{y:.1f} GPU-h lost, %{customdata} job(s)<extra></extra>",
            )
        )
    fig.update_layout(
        yaxis={"title": {"text": "GPU-hours lost"}},
        xaxis={"categoryorder": "total descending"},
        barmode="stack",
    )
    return figure_json(fig, 340)
