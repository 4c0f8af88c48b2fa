"""The recovery page's "Actions per hour / per day" figure draws an axis a person can read with
one bar as with ninety: whole hours or days, bars as wide as most of their bucket and centred
on it (plotly.js left alone makes one bar a millisecond wide and ticks it "23:59:59.9996")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from webapp.recovery.figures import actions_figure

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
DAY = datetime(2026, 12, 6, tzinfo=UTC)


def _span_ms(axis: dict) -> float:
    lo, hi = (datetime.fromisoformat(v) for v in axis["range"])
    return (hi - lo).total_seconds() * 1000


def test_one_day_of_actions_is_a_day_wide_bar_on_a_day_axis():
    fig = actions_figure(
        [(DAY, "drain", "succeeded", "slurm", 2), (DAY, "requeue", "dry_run", "slurm", 1)], "day"
    )
    axis = fig["layout"]["xaxis"]
    assert axis["type"] == "date"
    assert axis["dtick"] == DAY_MS and axis["tickformat"] == "%b %-d"
    assert axis["ticklabelmode"] == "period"  # "Dec 6" under its bar
    # The day before and the day after frame it: Dec 5 to Dec 8 (exclusive).
    assert axis["range"] == ["2026-12-05 00:00:00", "2026-12-08 00:00:00"]
    for bar in fig["data"]:
        assert bar["xperiod"] == DAY_MS and bar["xperiodalignment"] == "middle"
        assert bar["width"] == 0.8 * DAY_MS
        assert "%{x|%b %-d}" in bar["hovertemplate"]


def test_one_hour_of_actions_is_an_hour_wide_bar_on_an_hour_axis():
    fig = actions_figure([(DAY.replace(hour=2), "drain", "succeeded", "slurm", 1)], "hour")
    axis = fig["layout"]["xaxis"]
    assert axis["type"] == "date" and axis["dtick"] == HOUR_MS
    assert axis["range"] == ["2026-12-06 01:00:00", "2026-12-06 04:00:00"]
    assert axis["tickformat"].startswith("%H:%M")
    (bar,) = fig["data"]
    assert (bar["xperiod"], bar["width"]) == (HOUR_MS, 0.8 * HOUR_MS)


def test_ninety_days_tick_fortnightly_and_three_days_every_twelve_hours():
    days = [(DAY - timedelta(days=i), "drain", "succeeded", "slurm", 1) for i in range(90)]
    axis = actions_figure(days, "day")["layout"]["xaxis"]
    assert axis["dtick"] == 14 * DAY_MS and "ticklabelmode" not in axis
    assert _span_ms(axis) / axis["dtick"] <= 12
    hours = [(DAY - timedelta(hours=i), "drain", "succeeded", "slurm", 1) for i in range(72)]
    axis = actions_figure(hours, "hour")["layout"]["xaxis"]
    assert axis["dtick"] == 12 * HOUR_MS
    assert _span_ms(axis) / axis["dtick"] <= 12


def test_no_action_still_draws_a_day_axis():
    axis = actions_figure([], "day")["layout"]["xaxis"]
    assert (axis["type"], axis["dtick"]) == ("date", DAY_MS)
