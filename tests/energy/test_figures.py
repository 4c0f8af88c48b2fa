"""The energy page's breakdown figures at a real site's size: hundreds of Slurm accounts."""

from __future__ import annotations

import pytest

from webapp.energy.figures import BREAKDOWN_BARS, breakdown_figure
from webapp.energy.selectors import Line


def _line(key: str, kwh: float) -> Line:
    return Line(key, kwh / 2, kwh / 3, kwh, kwh / 10, kwh / 11, kwh / 1000, 1)


def test_a_breakdown_of_300_projects_draws_the_largest_and_one_bar_for_the_rest():
    lines = [_line(f"proj-{i:03d}", 300.0 - i) for i in range(300)]  # largest first
    idle = _line("(no job: idle)", 50.0)
    fig = breakdown_figure(lines, idle, "by project")
    (bar,) = fig["data"]
    assert len(bar["y"]) == BREAKDOWN_BARS + 1  # and the idle GPUs
    assert list(bar["y"][: BREAKDOWN_BARS - 1]) == [x.key for x in lines[: BREAKDOWN_BARS - 1]]
    assert bar["y"][-2] == f"{300 - BREAKDOWN_BARS + 1} others"
    assert bar["y"][-1] == idle.key
    # Nothing is lost: the bars add up to every project's energy and the idle GPUs'.
    assert sum(bar["x"]) == pytest.approx(sum(x.facility_kwh for x in lines) + 50.0)
    assert fig["layout"]["height"] < 700


def test_a_short_breakdown_draws_every_line():
    lines = [_line("llm", 10.0), _line("vision", 5.0)]
    (bar,) = breakdown_figure(lines, None, "by team")["data"]
    assert list(bar["y"]) == ["llm", "vision"]
