"""Date axes of the chart theme (webapp/core/charts.py) read at one point: plotly.js sizes an
axis from its data, so one bar or one marker alone gets a millisecond-wide axis ticked
"23:59:59.9996 / 00:00:00.0002". Every figure with a time axis that can hold a single point
(one day of a month, one failure) draws whole days or hours around it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from webapp.core.charts import DAY_MS, bucket_axis, bucket_bars, instant_axis
from webapp.energy.figures import daily_co2_pue_figure, daily_energy_figure, power_figure
from webapp.energy.selectors import Day
from webapp.failures.figures import timeline_figure
from webapp.failures.models import FailureEvent

T = datetime(2026, 12, 6, 2, 11, 7, tzinfo=UTC)


def _span(axis: dict) -> timedelta:
    lo, hi = (datetime.fromisoformat(v) for v in axis["range"])
    return hi - lo


def test_an_instant_alone_gets_two_hours_around_it():
    axis = instant_axis("time (UTC)", [T])
    assert axis["type"] == "date"
    assert axis["range"] == ["2026-12-06 01:11:07", "2026-12-06 03:11:07"]
    # Instants a day apart keep plotly.js's own range.
    assert "range" not in instant_axis("time (UTC)", [T, T + timedelta(days=1)])


def test_bucket_axis_refuses_an_unknown_bucket():
    with pytest.raises(ValueError, match="bucket: 'week' is not one of hour, day"):
        bucket_axis("t", [T], "week")
    with pytest.raises(ValueError, match="bucket: 'minute'"):
        bucket_bars("minute")


def test_one_failure_draws_two_hours_of_timeline():
    failure = FailureEvent(occurred_at=T, kind="gpu_error", category="infrastructure")
    fig = timeline_figure([(failure, "gpu-node-02", "/failures/1/")])
    axis = fig["layout"]["xaxis"]
    assert axis["type"] == "date" and _span(axis) == timedelta(hours=2)


def test_the_first_day_of_a_month_draws_a_day_wide_bar_on_a_day_axis():
    day = Day(datetime(2026, 12, 1, tzinfo=UTC), 10.0, 12.0, 18.0, 5.0, 1.5, 300.0)
    for build in (daily_energy_figure, daily_co2_pue_figure, lambda d: power_figure(d, 400.0)):
        fig = build([day])
        axis = fig["layout"]["xaxis"]
        assert axis["type"] == "date" and axis["dtick"] == DAY_MS
        assert axis["range"] == ["2026-11-30 00:00:00", "2026-12-03 00:00:00"]
        for trace in fig["data"]:
            # Bars and points sit in the middle of their day, bars most of a day wide.
            if trace["type"] == "bar":
                assert trace["width"] == 0.8 * DAY_MS
            if trace.get("hoverinfo") != "skip":
                assert (trace["xperiod"], trace["xperiodalignment"]) == (DAY_MS, "middle")
