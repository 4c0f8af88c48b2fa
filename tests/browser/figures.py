"""What a page's Plotly figures hold, as the browser sees them."""

from __future__ import annotations

# Per Plotly div: traces with points, and whether plotly.js drew SVG for it.
_FIGURES = """
() => Array.from(document.querySelectorAll('[data-figure]')).map(gd => ({
  name: gd.dataset.figure,
  traces: (gd.data || []).length,
  points: (gd.data || []).reduce((n, t) => n + ((t.x || t.y || []).length), 0),
  drawn: gd.querySelectorAll('.main-svg').length > 0 && gd.querySelectorAll('.trace').length > 0,
}))
"""


def drawn_figures(page) -> dict[str, dict]:
    """{figure name: traces, points, drawn} for every `[data-figure]` div, once all are drawn."""
    page.wait_for_function(
        "Array.from(document.querySelectorAll('[data-figure]'))"
        ".every(gd => gd.querySelector('.main-svg'))"
    )
    return {f["name"]: f for f in page.evaluate(_FIGURES)}
