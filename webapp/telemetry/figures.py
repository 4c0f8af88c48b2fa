"""Plotly figures of the live pages, built server-side and drawn by plotly.js in the browser.

Every function returns a plain dict (`fig.to_json()` decoded), ready for `json_script` or a
JSON response, that the page passes to `Plotly.newPlot` / `Plotly.react` unchanged.
"""

from __future__ import annotations

import functools
import importlib.resources
import json

# The series chart is core's (charts.py), so the job page draws a job's GPUs as this app draws a
# node's; it is named here too, for this app's pages and the node page.
from webapp.core.charts import SERIES_AXES as SERIES_AXES
from webapp.core.charts import TEMPLATE
from webapp.core.charts import series_figure as series_figure
from webapp.core.units import GIB
from webapp.telemetry.selectors import LatestGpu


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
