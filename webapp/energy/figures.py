"""Plotly figures of the energy page and the monthly report, built server-side (plain dicts
for `json_script`) and drawn by the vendored plotly.js, like webapp/recovery/figures.py."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from webapp.core.charts import (
    GPU_COLOURS,
    NO_DATA_COLOUR,
    bucket_axis,
    bucket_bars,
    figure_json,
    plain,
)
from webapp.energy.selectors import Day, EnergyReport, Line
from webapp.energy.trends import IDLE_KEY, Trends

# Bars and points sit in the middle of their day (one day alone is a day wide, not 1 ms).
_DAY = bucket_bars("day")
_DAY_POINT = {"xperiod": _DAY["xperiod"], "xperiodalignment": _DAY["xperiodalignment"]}
# GPU, rest of the node (IT - GPU), facility overhead (facility - IT): three shades of one
# hue so the stack reads as one quantity growing.
ENERGY_COLOURS = ("#1f4e99", "#5b8bd6", "#a9c4ee")
CO2_COLOUR = "#6b6b6b"


def _x(days: Sequence[Day]) -> list[str]:
    return [d.day.date().isoformat() for d in days]


def _day_axis(days: Sequence[Day]) -> dict:
    """Whole days around the month's days, a tick a day or a week (webapp/core/charts.py)."""
    return bucket_axis("day (UTC)", [d.day for d in days], "day")


def daily_energy_figure(days: Sequence[Day]) -> dict:
    """Daily energy stacked: GPUs, the rest of the nodes, facility overhead (kWh)."""
    fig = go.Figure()
    parts = (
        ("GPUs", [d.gpu_kwh for d in days]),
        ("rest of the nodes", [max(0.0, d.it_kwh - d.gpu_kwh) for d in days]),
        ("facility overhead (PUE)", [max(0.0, d.facility_kwh - d.it_kwh) for d in days]),
    )
    for (name, ys), colour in zip(parts, ENERGY_COLOURS, strict=True):
        fig.add_trace(
            go.Bar(
                name=name,
                x=_x(days),
                y=ys,
                marker={"color": colour},
                **_DAY,
                hovertemplate="%{x}<br>" + name + ": %{y:,.1f} kWh<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        xaxis=_day_axis(days),
        yaxis={"title": {"text": "kWh"}, "rangemode": "tozero"},
    )
    return figure_json(fig, 300)


def daily_co2_pue_figure(days: Sequence[Day]) -> dict:
    """Daily CO2e (bars, kg, location-based) and PUE (line, right axis)."""
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            name="CO2e, location-based (kg)",
            x=_x(days),
            y=[d.co2e_location_kg for d in days],
            marker={"color": CO2_COLOUR},
            **_DAY,
            hovertemplate="%{x}<br>%{y:,.1f} kg CO2e<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="PUE",
            x=_x(days),
            y=[d.pue for d in days],
            yaxis="y2",
            mode="lines+markers",
            line={"color": GPU_COLOURS[1]},
            **_DAY_POINT,
            hovertemplate="%{x}<br>PUE %{y:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis=_day_axis(days),
        yaxis={"title": {"text": "kg CO2e"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "PUE"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        },
    )
    return figure_json(fig, 300)


def power_figure(days: Sequence[Day], limit_w: float | None) -> dict:
    """Mean GPU power per day against the enforced power limit (TDP)."""
    fig = go.Figure()
    axis = _day_axis(days)
    fig.add_trace(
        go.Scatter(
            name="mean GPU power (W)",
            x=_x(days),
            y=[d.mean_gpu_power_w for d in days],
            mode="lines+markers",
            line={"color": GPU_COLOURS[0]},
            **_DAY_POINT,
            hovertemplate="%{x}<br>%{y:.0f} W<extra></extra>",
        )
    )
    if limit_w and days:
        fig.add_trace(
            go.Scatter(
                name=f"power limit ({limit_w:.0f} W)",
                x=axis["range"],  # across the whole axis, one day or thirty
                y=[limit_w, limit_w],
                mode="lines",
                line={"color": NO_DATA_COLOUR, "dash": "dash"},
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        xaxis=axis,
        yaxis={"title": {"text": "W per GPU"}, "rangemode": "tozero"},
    )
    return figure_json(fig, 260)


# Bars a breakdown draws: past this, the smallest are one bar (a site has hundreds of Slurm
# accounts; 28 px a bar, all of them would be a figure thousands of pixels tall). The table
# beside it has 50 rows and the CSV all.
BREAKDOWN_BARS = 15


def _folded(lines: Sequence[Line]) -> list[Line]:
    """`lines` (largest first) with all past the first BREAKDOWN_BARS - 1 summed into one."""
    if len(lines) <= BREAKDOWN_BARS:
        return list(lines)
    head, rest = list(lines[: BREAKDOWN_BARS - 1]), lines[BREAKDOWN_BARS - 1 :]
    other = Line(
        f"{len(rest)} others",
        *(sum(getattr(x, f) for x in rest) for f in _SUMMED),
    )
    return [*head, other]


_SUMMED = (
    "gpu_hours", "gpu_kwh", "facility_kwh", "co2e_location_kg", "co2e_market_kg", "share", "jobs"
)  # fmt: skip


def breakdown_figure(lines: Sequence[Line], idle: Line | None, title: str) -> dict:
    """Facility kWh per team / project / type / outcome (horizontal bars, the smallest folded
    into one past BREAKDOWN_BARS), idle GPUs last."""
    folded = len(lines) > BREAKDOWN_BARS
    lines = _folded(lines)
    rows = [*lines, *([idle] if idle else [])]
    colours = [ENERGY_COLOURS[0]] * len(lines) + [NO_DATA_COLOUR] * (len(rows) - len(lines))
    if folded:
        colours[len(lines) - 1] = ENERGY_COLOURS[1]  # the sum of the rest, lighter
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=[plain(r.key) for r in rows],
            x=[r.facility_kwh for r in rows],
            customdata=[[r.share * 100, r.gpu_kwh] for r in rows],
            marker={"color": colours},
            hovertemplate="%{y}: %{x:,.1f} kWh facility (%{customdata[0]:.1f}%), "
            "GPUs %{customdata[1]:,.1f} kWh<extra></extra>",
        )
    )
    fig.update_layout(
        # The unit in the title too: a printed figure's axis title is easy to miss.
        title={"text": f"Facility kWh {title}", "font": {"size": 13}},
        xaxis={"title": {"text": "facility kWh"}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        showlegend=False,
    )
    return figure_json(fig, 80 + 28 * max(3, len(rows)))


_MONTH_AXIS = {"title": {"text": "month (UTC)"}, "type": "category"}


# The folded teams' trace: light, apart from the ten named teams' colours.
OTHER_TEAMS_COLOUR = "#aec7e8"


def _team_colour(i: int, team: str) -> str:
    if team == IDLE_KEY:
        return NO_DATA_COLOUR
    return OTHER_TEAMS_COLOUR if i >= TREND_TEAMS else GPU_COLOURS[i % len(GPU_COLOURS)]


# Teams the trend figures stack one by one (t.teams is largest first); the rest are one trace:
# a site's tens of teams made a legend of forty names, a scroll box over the bars. The page's
# team table and the CSV have every team.
TREND_TEAMS = 10


def _trend_traces(t: Trends, values: str) -> list[tuple[str, list[float]]]:
    """(name, value per month) of the largest TREND_TEAMS teams, the rest summed as one, and
    the idle GPUs last."""
    teams = [team for team in t.teams if team != IDLE_KEY]
    head, rest = teams[:TREND_TEAMS], teams[TREND_TEAMS:]
    if len(rest) == 1:
        head, rest = teams, []
    per_month = [getattr(m, values) for m in t.months]
    out = [(team, [v.get(team, 0.0) for v in per_month]) for team in head]
    if rest:
        out.append(
            (f"{len(rest)} other teams", [sum(v.get(x, 0.0) for x in rest) for v in per_month])
        )
    if IDLE_KEY in t.teams:
        out.append((IDLE_KEY, [v.get(IDLE_KEY, 0.0) for v in per_month]))
    return out


def _trend_bars(t: Trends, values: str, unit: str, digits: int) -> go.Figure:
    """Per month, one stacked bar per team, the smallest folded into one past TREND_TEAMS
    (the idle GPUs last, grey); `values` names the TrendMonth dict (team_kwh or
    team_co2e_kg)."""
    fig = go.Figure()
    months = [m.month for m in t.months]
    for i, (team, ys) in enumerate(_trend_traces(t, values)):
        fig.add_trace(
            go.Bar(
                name=plain(team),
                x=months,
                y=ys,
                marker={"color": _team_colour(i, team)},
                # The team by reference: written into the template, a name holding "%{"
                # would be read as a placeholder.
                hovertemplate="%{x} %{fullData.name}: %{y:,." + str(digits) + "f} " + unit
                + "<extra></extra>",
            )
        )  # fmt: skip
    fig.update_layout(
        barmode="stack",
        xaxis=_MONTH_AXIS,
        yaxis={"title": {"text": unit}, "rangemode": "tozero"},
    )
    return fig


def trend_energy_figure(t: Trends, height: int = 260) -> dict:
    """12 months of facility kWh, stacked by team."""
    return figure_json(_trend_bars(t, "team_kwh", "facility kWh", 1), height)


def trend_co2_figure(t: Trends, height: int = 260) -> dict:
    """12 months of location-based CO2e, stacked by team."""
    return figure_json(_trend_bars(t, "team_co2e_kg", "kg CO2e", 1), height)


def trend_pue_figure(t: Trends, height: int = 220) -> dict:
    """Each month's PUE (left) and the grid intensity used (g CO2e/kWh, right)."""
    months = [m.month for m in t.months]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name="PUE",
            x=months,
            y=[m.pue for m in t.months],
            mode="lines+markers",
            line={"color": GPU_COLOURS[1]},
            hovertemplate="%{x}<br>PUE %{y:.2f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="grid intensity (g CO2e/kWh)",
            x=months,
            y=[m.intensity_g_per_kwh for m in t.months],
            yaxis="y2",
            mode="lines+markers",
            line={"color": CO2_COLOUR, "dash": "dot"},
            hovertemplate="%{x}<br>%{y:.0f} g CO2e/kWh<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis=_MONTH_AXIS,
        yaxis={"title": {"text": "PUE"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "g CO2e/kWh"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        },
    )
    return figure_json(fig, height)


def trend_figures(t: Trends, *, compact: bool = False) -> dict:
    """The trends' three figures; `compact`: the heights that fit the report's A4 sheet."""
    bars, line = (200, 170) if compact else (300, 260)
    if not compact:
        # The legend sits above the bars, about three names a row at half the page's width:
        # room for its rows, so that it never becomes a scroll box over the bars.
        legend_rows = -(-len(_trend_traces(t, "team_kwh")) // 3)
        bars += 22 * max(0, legend_rows - 1)
    return {
        "trend-energy": trend_energy_figure(t, bars),
        "trend-co2": trend_co2_figure(t, bars),
        "trend-pue": trend_pue_figure(t, line),
    }


def page_figures(r: EnergyReport, trends: Trends | None = None) -> dict:
    out = {
        "daily-energy": daily_energy_figure(r.days),
        "daily-co2": daily_co2_pue_figure(r.days),
        "power": power_figure(r.days, r.mean_power_limit_w),
        "by-team": breakdown_figure(r.by_team, r.idle_line, "by team"),
        "by-project": breakdown_figure(r.by_project, None, "by project"),
        "by-type": breakdown_figure(r.by_type, None, "by job type"),
        "by-outcome": breakdown_figure(r.by_outcome, None, "by outcome"),
    }
    if trends is not None:
        out.update(trend_figures(trends))
    return out
