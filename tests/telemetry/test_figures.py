"""The series figure of the node, GPU and job pages: written as plain dicts, it
must be what plotly's own graph objects give, or plotly.js would draw something else."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from webapp.core.charts import GPU_COLOURS, TEMPLATE
from webapp.telemetry.figures import SERIES_AXES, series_figure
from webapp.telemetry.selectors import SERIES_METRICS, Series


def _plotly_series_figure(series: dict[str, Series], x_range) -> dict:
    """The figure as plotly builds it, trace by trace (series_figure as it was before)."""
    names = list(SERIES_AXES)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.03)
    for i, (name_of, s) in enumerate(series.items()):
        label = html.escape(name_of, quote=False)  # names from outside are escaped for Plotly
        for row, name in enumerate(names, start=1):
            axis_title, convert = SERIES_AXES[name]
            fig.add_trace(
                go.Scatter(
                    x=s.ts,
                    y=[convert(v) if v is not None else None for v in s.values[name]],
                    name=label,
                    legendgroup=label,
                    showlegend=row == 1,
                    mode="lines" if len(s.ts) > 60 else "lines+markers",
                    marker={"size": 4},
                    line={"color": GPU_COLOURS[i % len(GPU_COLOURS)], "width": 1.5},
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


def _series(start: datetime, points: int, step_s: int, seed: float) -> Series:
    s = Series(ts=[start + timedelta(seconds=k * step_s) for k in range(points)])
    for m in SERIES_METRICS:
        s.values[m] = [seed + k * 0.37 for k in range(points)]
    s.values["fb_used_bytes"] = [40 * 2**30 + k for k in range(points)]  # integers, as raw
    return s


def test_series_figure_is_what_plotly_builds():
    until = datetime(2026, 11, 3, 12, 0, 7, 123456, tzinfo=UTC)
    day = {f"GPU {i}": _series(until - timedelta(days=1), 1440, 60, 10.0 * i) for i in range(8)}
    # Gaps (None), values plotly writes as null (NaN, infinity), and a GPU of few points
    # (markers too), with a label that needs escaping in HTML and JSON.
    odd = _series(until - timedelta(minutes=3), 3, 60, 5.5)
    odd.values["gpu_util"] = [None, float("nan"), 70.0]
    odd.values["power_w"] = [float("inf"), -0.0, 0]
    day['GPU <"9">'] = odd
    for series, x_range in (
        (day, (until - timedelta(days=1), until)),
        (day, None),
        ({"GPU 0": Series()}, (until - timedelta(hours=1), until)),
        ({}, None),
    ):
        expected = _plotly_series_figure(series, x_range)
        figure = series_figure(series, x_range=x_range)
        # The same JSON text: the keys in the same order, every number the same.
        assert json.dumps(figure) == json.dumps(expected)


def test_a_series_named_with_markup_reaches_plotly_escaped():
    """A series is named by its node and GPU, text from outside: Plotly reads <a href> in a
    legend or hover as markup, so the name goes escaped and is shown as written."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    hostile = '<a href="https://example.org/x">gpu-a-01</a> GPU 0'
    s = Series([t0, t0 + timedelta(minutes=1)], {m: [1.0, 2.0] for m in SERIES_METRICS})
    fig = series_figure({hostile: s})
    text = json.dumps(fig)
    assert "<a href" not in text
    trace = fig["data"][0]
    assert trace["name"] == '&lt;a href="https://example.org/x"&gt;gpu-a-01&lt;/a&gt; GPU 0'
