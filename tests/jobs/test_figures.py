"""The jobs figures, written as plain dicts, are valid Plotly figures laid out as plotly's own
helpers would (plotly.graph_objects validates every property it is given)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.subplots import make_subplots

from webapp.jobs import figures
from webapp.jobs.characterization import TelemetryCdfs, TypeStats
from webapp.jobs.data.reference import reference_cdfs, reference_summary_rows
from webapp.jobs.selectors import AllocationRow


def valid(fig: dict) -> go.Figure:
    """The figure as plotly.graph_objects reads it: a misspelt property raises ValueError."""
    return go.Figure(fig)


def test_template_is_plotly_s_own():
    assert figures.template() == pio.templates[figures.TEMPLATE].to_plotly_json()


@pytest.mark.parametrize(
    "grid",
    [
        {"rows": 1, "cols": 2, "h_spacing": 0.04, "v_spacing": 0.0, "titles": ["a", "b"]},
        {"rows": 2, "cols": 2, "h_spacing": 0.07, "v_spacing": 0.16, "titles": list("abcd")},
    ],
)
def test_grid_is_make_subplots_geometry(grid):
    layout, axes = figures._grid(
        grid["rows"],
        grid["cols"],
        grid["titles"],
        h_spacing=grid["h_spacing"],
        v_spacing=grid["v_spacing"],
    )
    want = make_subplots(
        rows=grid["rows"],
        cols=grid["cols"],
        subplot_titles=grid["titles"],
        horizontal_spacing=grid["h_spacing"],
        vertical_spacing=grid["v_spacing"] or None,
    ).layout.to_plotly_json()
    for name, axis in layout.items():
        if name == "annotations":
            for mine, theirs in zip(axis, want["annotations"], strict=True):
                assert mine == {
                    **theirs,
                    "x": pytest.approx(theirs["x"]),
                    "y": pytest.approx(theirs["y"]),
                }
        else:
            assert axis["anchor"] == want[name]["anchor"]
            assert axis["domain"] == pytest.approx(want[name]["domain"])
    assert axes[(grid["rows"], grid["cols"])] == (
        f"x{grid['rows'] * grid['cols']}",
        f"y{grid['rows'] * grid['cols']}",
    )


def test_every_jobs_figure_is_valid_plotly():
    def stats(job_type, count, time_share):
        return TypeStats(job_type, job_type, count, count, 1.0, count / 10, time_share,
                         *([1.0] * 6), 8)  # fmt: skip

    types = [stats("eval", 9, 0.1), stats("pretrain", 1, 0.9)]
    assert valid(figures.type_shares_figure(types)).data[0].y == (90.0, 10.0)
    cdf = valid(figures.cdf_figure({"eval": [(1.0, 0.5), (2.0, 1.0)]}, x_title="s"))
    assert cdf.layout.xaxis.type == "log" and cdf.layout.template.layout.plot_bgcolor == "white"
    shares = {"completed": 0.5, "cancelled": 0.1, "failed": 0.4}
    states = valid(figures.states_figure("acme", shares, shares, reference_summary_rows()))
    assert states.layout.yaxis2.matches == "y" and len(states.layout.annotations) == 2
    now = datetime.now(UTC)
    telemetry = TelemetryCdfs(
        now - timedelta(days=1), now, "raw samples", 4, None, {"gpu_util": [(0.0, 0.5)]}
    )
    fig = valid(figures.telemetry_figure("acme", telemetry, reference_cdfs()))
    assert {t.xaxis for t in fig.data} == {"x", "x2", "x3", "x4"}
    assert fig.layout.xaxis4.title.text == "GPU power (W)"
    alloc = AllocationRow(1, 1, "n1", None, 0, now - timedelta(hours=1), None)
    assert valid(figures.allocation_timeline([alloc], now)).data[0].y == ("n1 GPU 0",)
