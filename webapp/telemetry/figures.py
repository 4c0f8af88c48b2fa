"""Plotly figures of the live pages, built server-side and drawn by plotly.js in the browser.

Every function returns a plain dict (`fig.to_json()` decoded), ready for `json_script` or a
JSON response, that the page passes to `Plotly.newPlot` / `Plotly.react` unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from webapp.core.charts import (
    ERROR_COLOUR,
    GPU_COLOURS,
    NO_DATA_COLOUR,
    TEMPLATE,
    UTIL_COLOURSCALE,
)
from webapp.core.units import GIB
from webapp.telemetry.choices import GpuStatus
from webapp.telemetry.selectors import LatestGpu, Series

# Metric name -> (axis title with unit, conversion from the stored unit).
SERIES_AXES: dict[str, tuple[str, Callable[[float], float]]] = {
    "gpu_util": ("GPU util (%)", lambda v: v),
    "sm_active": ("SM active (%)", lambda v: v * 100.0),
    "fb_used_bytes": ("memory used (GiB)", lambda v: v / GIB),
    "power_w": ("power (W)", lambda v: v),
    "gpu_temp_c": ("temperature (°C)", lambda v: v),
}


def _fmt(value: float | int | None, unit: str, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f} {unit}".rstrip()


def gpu_hover_values(gpu: LatestGpu) -> dict[str, str]:
    """The latest values of a GPU as display strings with units ("n/a" when missing)."""
    sm = gpu.value("sm_active")
    mem = gpu.value("fb_used_bytes")
    return {
        "gpu_util": _fmt(gpu.value("gpu_util"), "%"),
        "sm_active": _fmt(sm * 100 if sm is not None else None, "%"),
        "power_w": _fmt(gpu.value("power_w"), "W"),
        "gpu_temp_c": _fmt(gpu.value("gpu_temp_c"), "°C"),
        "fb_used": _fmt(mem / GIB if mem is not None else None, "GiB", 1),
    }


_HEATMAP_HOVER = (
    "<b>%{customdata[0]}</b> · GPU %{customdata[1]}<br>"
    "%{customdata[2]}<br>%{customdata[3]}<br>"
    "status: %{customdata[9]}<br>"
    "util: %{customdata[4]} · SM active: %{customdata[5]}<br>"
    "power: %{customdata[6]} · temp: %{customdata[7]}<br>"
    "memory used: %{customdata[8]}"
    "<extra></extra>"
)


def overview_heatmap(
    gpus: list[LatestGpu],
    node_url: Callable[[int], str],
    *,
    busy_util_pct: float,
    stale_after_s: int,
) -> dict:
    """Node x GPU-index heatmap of utilization for one cluster: one cell per GPU.

    Three traces: utilization (colour scale), GPUs with no utilization to show (grey; stale or
    not reported), and a red cross over erroring GPUs. Each cell's customdata carries the
    hover text and the node page URL (index 10) that a click opens.
    """
    hostnames = list(dict.fromkeys(g.hostname for g in gpus))
    row_of = {h: i for i, h in enumerate(hostnames)}
    width = max((g.index for g in gpus), default=-1) + 1
    util = [[None] * width for _ in hostnames]
    no_data = [[None] * width for _ in hostnames]
    custom = [[None] * width for _ in hostnames]
    err_x, err_y = [], []
    for g in gpus:
        r, c = row_of[g.hostname], g.index
        hover = gpu_hover_values(g)
        status = g.status
        shown = g.value("gpu_util")
        if status == GpuStatus.STALE or shown is None:
            no_data[r][c] = 1
        else:
            util[r][c] = shown
        if status == GpuStatus.ERRORING:
            err_x.append(c)
            err_y.append(g.hostname)
        custom[r][c] = [
            g.hostname,
            g.index,
            g.uuid,
            g.model or "unknown model",
            hover["gpu_util"],
            hover["sm_active"],
            hover["power_w"],
            hover["gpu_temp_c"],
            hover["fb_used"],
            status if status != GpuStatus.STALE else f"stale (no sample in {stale_after_s} s)",
            node_url(g.node_id),
        ]
    x = list(range(width))
    fig = go.Figure()
    fig.add_trace(
        go.Heatmap(
            name="GPU util (%)",
            z=util,
            x=x,
            y=hostnames,
            customdata=custom,
            zmin=0,
            zmax=100,
            colorscale=UTIL_COLOURSCALE,
            colorbar={"title": {"text": "GPU util (%)"}, "thickness": 14, "len": 1.0},
            hoverongaps=False,
            hovertemplate=_HEATMAP_HOVER,
            xgap=2,
            ygap=2,
            showlegend=False,
        )
    )
    fig.add_trace(
        go.Heatmap(
            name=f"no data (stale > {stale_after_s} s)",
            z=no_data,
            x=x,
            y=hostnames,
            customdata=custom,
            zmin=0,
            zmax=1,
            colorscale=[[0, NO_DATA_COLOUR], [1, NO_DATA_COLOUR]],
            showscale=False,
            hoverongaps=False,
            hovertemplate=_HEATMAP_HOVER,
            xgap=2,
            ygap=2,
            showlegend=True,
        )
    )
    fig.add_trace(
        go.Scatter(
            name="erroring (ECC DBE / row remap)",
            x=err_x,
            y=err_y,
            mode="markers",
            marker={"symbol": "x-thin", "size": 14, "line": {"width": 3, "color": ERROR_COLOUR}},
            hoverinfo="skip",
            showlegend=True,
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        # Rows of 34 px, at least 100 px of plot so the colour bar stays readable.
        height=95 + max(34 * len(hostnames), 100),
        margin={"l": 10, "r": 10, "t": 30, "b": 45},
        xaxis={
            "title": {"text": "GPU index"},
            "tickmode": "linear",
            "dtick": 1,
            "range": [-0.5, max(width, 1) - 0.5],
            "showgrid": False,
            "zeroline": False,
        },
        yaxis={
            "title": {"text": "node"},
            "type": "category",
            "autorange": "reversed",
            "automargin": True,
            "showgrid": False,
        },
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "xanchor": "left"},
        meta={"busy_util_pct": busy_util_pct},
    )
    return json.loads(fig.to_json())


def series_figure(
    series: dict[str, Series], *, x_range: tuple[datetime, datetime] | None = None
) -> dict:
    """One panel per metric (shared time axis), one line per GPU; keys of `series` are labels.

    `x_range` pins the time axis to the range asked for, so a GPU that reported for only a
    minute of the last hour shows as a short line at the right end, not as a full-width one.
    """
    names = list(SERIES_AXES)
    fig = make_subplots(
        rows=len(names),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
    )
    for i, (label, s) in enumerate(series.items()):
        colour = GPU_COLOURS[i % len(GPU_COLOURS)]
        for row, name in enumerate(names, start=1):
            axis_title, convert = SERIES_AXES[name]
            y = [convert(v) if v is not None else None for v in s.values[name]]
            fig.add_trace(
                go.Scatter(
                    x=s.ts,
                    y=y,
                    name=label,
                    legendgroup=label,
                    showlegend=row == 1,
                    # Markers too when points are few: a single point has no line to draw.
                    mode="lines" if len(s.ts) > 60 else "lines+markers",
                    marker={"size": 4},
                    line={"color": colour, "width": 1.5},
                    connectgaps=False,
                    hovertemplate=f"{label}: %{{y:,.1f}}<extra>{axis_title}</extra>",
                ),
                row=row,
                col=1,
            )
    for row, name in enumerate(names, start=1):
        fig.update_yaxes(title_text=SERIES_AXES[name][0], rangemode="tozero", row=row, col=1)
    fig.update_yaxes(range=[0, 100], row=1, col=1)
    fig.update_yaxes(range=[0, 100], row=2, col=1)
    fig.update_xaxes(title_text="time (UTC)", row=len(names), col=1)
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    fig.update_layout(
        template=TEMPLATE,
        height=170 * len(names) + 90,
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        hovermode="x unified",
        legend={
            "title": {"text": "GPU"},
            "orientation": "h",
            "x": 0,
            "y": 1.0,
            "yanchor": "bottom",
            "xanchor": "left",
        },
    )
    return json.loads(fig.to_json())
