"""Plotly figures of the live pages, built server-side and drawn by plotly.js in the browser.

Every function returns a plain dict (`fig.to_json()` decoded), ready for `json_script` or a
JSON response, that the page passes to `Plotly.newPlot` / `Plotly.react` unchanged.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Callable
from datetime import datetime

from plotly.subplots import make_subplots

from webapp.core.charts import (
    GPU_COLOURS,
    TEMPLATE,
)
from webapp.core.units import GIB
from webapp.telemetry.selectors import LatestGpu, Series


def _same(value: float) -> float:
    return value


# Metric name -> (axis title with unit, conversion from the stored unit).
SERIES_AXES: dict[str, tuple[str, Callable[[float], float]]] = {
    "gpu_util": ("GPU util (%)", _same),
    "sm_active": ("SM active (%)", lambda v: v * 100.0),
    "fb_used_bytes": ("memory used (GiB)", lambda v: v / GIB),
    "power_w": ("power (W)", _same),
    "gpu_temp_c": ("temperature (°C)", _same),
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


@functools.cache
def template_json() -> dict:
    """TEMPLATE as plotly.js reads it (layout.template), for figures drawn in the browser."""
    path = importlib.resources.files("plotly") / f"package_data/templates/{TEMPLATE}.json"
    return json.loads(path.read_text())


def series_figure(
    series: dict[str, Series], *, x_range: tuple[datetime, datetime] | None = None
) -> dict:
    """One panel per metric (shared time axis), one line per GPU; keys of `series` are labels.

    `x_range` pins the time axis to the range asked for, so a GPU that reported for only a
    minute of the last hour shows as a short line at the right end, not as a full-width one.

    The traces are written as the plain dicts `fig.to_json()` would give (the same keys in the
    same order, times as ISO strings): plotly's graph objects validate and deep-copy every
    point, slow for a node's day (8 GPUs x 5 metrics x 1,440 minutes). The layout,
    which does not depend on the data, is plotly's own, built once.
    """
    names = list(SERIES_AXES)
    layout = json.loads(_series_layout_json())
    if x_range is not None:
        bounds = [_iso(x_range[0]), _iso(x_range[1])]
        for row in range(1, len(names) + 1):
            layout[f"xaxis{row if row > 1 else ''}"]["range"] = list(bounds)
    data = []
    iso: dict[datetime, str] = {}
    for i, (label, s) in enumerate(series.items()):
        colour = GPU_COLOURS[i % len(GPU_COLOURS)]
        # Markers too when points are few: a single point has no line to draw.
        mode = "lines" if len(s.ts) > 60 else "lines+markers"
        x = [iso.get(t) or iso.setdefault(t, _iso(t)) for t in s.ts]
        for row, name in enumerate(names, start=1):
            axis_title, convert = SERIES_AXES[name]
            suffix = row if row > 1 else ""
            data.append(
                {
                    "connectgaps": False,
                    "hovertemplate": f"{label}: %{{y:,.1f}}<extra>{axis_title}</extra>",
                    "legendgroup": label,
                    "line": {"color": colour, "width": 1.5},
                    "marker": {"size": 4},
                    "mode": mode,
                    "name": label,
                    "showlegend": row == 1,
                    "x": list(x),
                    "y": _finite(s.values[name], convert),
                    "type": "scatter",
                    "xaxis": f"x{suffix}",
                    "yaxis": f"y{suffix}",
                }
            )
    return {"data": data, "layout": layout}


def _finite(values: list[float | None], convert: Callable[[float], float]) -> list[float | None]:
    """`values` converted, NaN and infinities as None (null), as plotly's JSON encoder writes
    them (`v - v` is 0 only for a finite number)."""
    if convert is _same:
        return [v if v is not None and v - v == 0 else None for v in values]
    return [convert(v) if v is not None and v - v == 0 else None for v in values]


def _iso(ts: datetime) -> str:
    """A time as plotly's JSON encoder writes it (datetime.isoformat)."""
    return ts.isoformat()


@functools.cache
def _series_layout_json() -> str:
    """series_figure's layout without a time range, as JSON: plotly's subplots, axes and
    template, built once per process."""
    names = list(SERIES_AXES)
    fig = make_subplots(
        rows=len(names),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
    )
    for row, name in enumerate(names, start=1):
        fig.update_yaxes(title_text=SERIES_AXES[name][0], rangemode="tozero", row=row, col=1)
    fig.update_yaxes(range=[0, 100], row=1, col=1)
    fig.update_yaxes(range=[0, 100], row=2, col=1)
    fig.update_xaxes(title_text="time (UTC)", row=len(names), col=1)
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
    return json.dumps(json.loads(fig.to_json())["layout"])
