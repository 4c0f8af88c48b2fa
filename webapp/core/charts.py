"""The one chart theme: every app's Plotly figures use these, so pages look alike."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

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
