"""The one chart theme: every app's Plotly figures use these, so pages look alike."""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from webapp.core.units import GIB

if TYPE_CHECKING:
    import plotly.graph_objects as go

TEMPLATE = "plotly_white"

# One colour per GPU index, so GPU 3 has one colour on every panel, and per job type:
# Plotly's default qualitative palette (D3 category10), which keeps neighbouring lines apart.
# Past ten GPUs on a node the colours repeat.
GPU_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)

# Cells with no utilization to show (stale, or a GPU that does not report it).
NO_DATA_COLOUR = "#b9bec7"
ERROR_COLOUR = "#d62728"
UTIL_COLOURSCALE = "Viridis"


# Legends in one row above the plot, from its left edge.
LEGEND = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "xanchor": "left"}


def figure_json(fig: go.Figure, height: int) -> dict:
    """A finished figure in the theme, `height` px tall with the legend above, as the plain
    dict a page writes with `json_script` for the vendored plotly.js."""
    fig.update_layout(
        template=TEMPLATE,
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 45},
        legend=LEGEND,
    )
    return json.loads(fig.to_json())


def plain(text: str) -> str:
    """Text from outside (job ids and names, users, teams, projects, datasets) as a Plotly
    label, hover text or legend name. Plotly reads <b>, <br>, <span style> and <a href> in
    those as markup, so a team named `<a href=...>` would draw a link; escaped, Plotly shows
    the text as written (it decodes the entities)."""
    return html.escape(text, quote=False)


# --- Date axes that read at any size --------------------------------------------------------
# plotly.js sizes an axis from its data: one bar, or points all at one instant, make a range of
# a millisecond, ticked "23:59:59.9996". Bars per hour or day get their bucket's width and an
# axis in whole buckets; instants get an axis of at least `min_span`.

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
BUCKET_MS = {"hour": HOUR_MS, "day": DAY_MS}
# A bar fills this share of its bucket, leaving a gap between neighbours.
BAR_FILL = 0.8
# Tick steps, in buckets, from which the axis takes the smallest giving at most MAX_TICKS.
_STEPS = {HOUR_MS: (1, 2, 3, 6, 12, 24, 48), DAY_MS: (1, 2, 7, 14, 28, 56, 91, 182, 364)}
MAX_TICKS = 12
_PLOTLY_DATE = "%Y-%m-%d %H:%M:%S"


def _bucket_ms(bucket: str) -> int:
    if bucket not in BUCKET_MS:
        raise ValueError(f"bucket: {bucket!r} is not one of {', '.join(BUCKET_MS)}")
    return BUCKET_MS[bucket]


def bucket_bars(bucket: str) -> dict:
    """Settings of a bar trace whose x values are the starts of hour or day buckets: each bar
    is centred on its bucket and spans BAR_FILL of it."""
    period = _bucket_ms(bucket)
    return {"xperiod": period, "xperiodalignment": "middle", "width": BAR_FILL * period}


def bucket_axis(title: str, starts: Sequence[datetime], bucket: str) -> dict:
    """A date axis for bars per hour or day starting at `starts` (UTC): whole buckets from the
    one before the first bar to the one after the last, a tick per bucket or per a few of them
    (at most MAX_TICKS); a day's label is centred under its bar, an hour's ticks are its edges."""
    period = _bucket_ms(bucket)
    axis: dict = {
        "title": {"text": title},
        "type": "date",
        "tickformat": "%b %-d" if period == DAY_MS else "%H:%M\n%b %-d",
    }
    k = 1
    if starts:
        step = timedelta(milliseconds=period)
        lo, hi = min(starts) - step, max(starts) + 2 * step
        buckets = round((hi - lo) / step)
        k = next((k for k in _STEPS[period] if buckets / k <= MAX_TICKS), _STEPS[period][-1])
        axis["range"] = [
            _naive_utc(lo).strftime(_PLOTLY_DATE),
            _naive_utc(hi).strftime(_PLOTLY_DATE),
        ]
    axis["dtick"] = k * period
    if period == DAY_MS and k == 1:
        axis["ticklabelmode"] = "period"  # "Dec 6" under the day's bar, not at its edge
    return axis


def instant_axis(
    title: str, instants: Sequence[datetime], min_span: timedelta = timedelta(hours=2)
) -> dict:
    """A date axis for events at `instants` (UTC): plotly.js's own range, unless they all fall
    within `min_span`; then `min_span` centred on them."""
    axis: dict = {"title": {"text": title}, "type": "date"}
    if instants and max(instants) - min(instants) < min_span:
        mid = min(instants) + (max(instants) - min(instants)) / 2
        lo, hi = _naive_utc(mid - min_span / 2), _naive_utc(mid + min_span / 2)
        axis["range"] = [lo.strftime(_PLOTLY_DATE), hi.strftime(_PLOTLY_DATE)]
    return axis


def _naive_utc(t: datetime) -> datetime:
    """A datetime as plotly.js reads one: naive, in UTC (an aware one is converted)."""
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


# --- GPU sample series, one panel per metric -------------------------------------------------
# The node, GPU and job pages draw GPUs' series (telemetry's read API: the wire schema's fields,
# collectors/schema.py) alike.


class TimeSeries(Protocol):
    """One GPU's series: timestamps and one list of values per metric (None: no value)."""

    ts: list[datetime]
    values: dict[str, list[float | None]]


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


def series_figure(
    series: Mapping[str, TimeSeries], *, x_range: tuple[datetime, datetime] | None = None
) -> dict:
    """One panel per metric of SERIES_AXES (shared time axis), one line per GPU; keys of
    `series` are labels, values a GPU's series as telemetry's read API gives them.

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
    for i, (name_of, s) in enumerate(series.items()):
        # A series is named by its GPU and node ("gpu-a-01 GPU 3"): text from outside, which
        # Plotly would read as markup in the legend and the hover.
        label = plain(name_of)
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
    from plotly.subplots import make_subplots  # plotly's graph objects load once, when drawn

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
