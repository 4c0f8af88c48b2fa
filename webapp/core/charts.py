"""The one chart theme: every app's Plotly figures use these, so pages look alike."""

from __future__ import annotations

import html

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


def plain(text: str) -> str:
    """Text from outside (job ids and names, users, teams, projects, datasets) as a Plotly
    label, hover text or legend name. Plotly reads <b>, <br>, <span style> and <a href> in
    those as markup, so a team named `<a href=...>` would draw a link; escaped, Plotly shows
    the text as written (it decodes the entities)."""
    return html.escape(text, quote=False)
