"""The one chart theme: every app's Plotly figures use these, so pages look alike."""

from __future__ import annotations

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
