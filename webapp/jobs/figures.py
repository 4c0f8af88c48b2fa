"""Plotly figures of the jobs pages, built server-side as plain dicts (for `json_script`) and
drawn by the vendored plotly.js, like webapp/telemetry/figures.py.

Written as the JSON plotly.js reads rather than through plotly's Python objects: those validate
every property and copy the template into each figure, which cost the characterization page
most of its time. The look is the same: the traces and
layout are what plotly.graph_objects produced, with the same template (TEMPLATE) and the
subplot geometry of plotly.subplots.make_subplots (tests/jobs/test_figures.py checks both).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from datetime import datetime

from webapp.core.charts import GPU_COLOURS, SERIES_AXES, TEMPLATE
from webapp.jobs.characterization import FINAL_GROUPS, TelemetryCdfs, TypeStats
from webapp.jobs.choices import JobType
from webapp.jobs.job_page import JobBands, NodeAllocation, NodeEnergy
from webapp.jobs.selectors import AllocationRow

# One colour per job type on every figure (Plotly's default cycle, in JobType order).
TYPE_COLOURS: dict[str, str] = {t.value: c for t, c in zip(JobType, GPU_COLOURS, strict=False)} | {
    "all": "#1d2330"
}
TYPE_LABELS: dict[str, str] = {t.value: t.label for t in JobType} | {"all": "All types"}
SITE_COLOUR = "#1d2330"
# The paper's clusters and the older traces, drawn dashed / dotted beside the site.
REFERENCE_STYLE: dict[str, dict] = {
    "Seren": {"color": "#1f77b4", "dash": "dash"},
    "Kalos": {"color": "#ff7f0e", "dash": "dash"},
    "Philly": {"color": "#7f7f7f", "dash": "dot"},
    "Helios": {"color": "#8c564b", "dash": "dot"},
    "PAI": {"color": "#2ca02c", "dash": "dot"},
}
GIB_PER_80GIB_PCT = 0.8  # AcmeTrace memory is FB_USED / 80 GiB in %: x% = 0.8 x GiB

_LEGEND = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "xanchor": "left"}


@functools.cache
def template() -> dict:
    """TEMPLATE's JSON, as plotly ships it (what plotly.io.templates[TEMPLATE] holds)."""
    path = importlib.resources.files("plotly") / f"package_data/templates/{TEMPLATE}.json"
    return json.loads(path.read_text())


def _done(data: list[dict], layout: dict, height: int, *, subplot_titles: bool = False) -> dict:
    # Subplot titles sit at the top of the plot area: the legend goes above them.
    legend = {**_LEGEND, "y": 1.1} if subplot_titles else _LEGEND
    layout = {
        **layout,
        "template": template(),
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 90 if subplot_titles else 40, "b": 45},
        "legend": legend,
    }
    return {"data": data, "layout": layout}


def _grid(
    rows: int, cols: int, titles: list[str], *, h_spacing: float, v_spacing: float
) -> tuple[dict, dict[tuple[int, int], tuple[str, str]]]:
    """The layout of a rows x cols grid of plots (axes and title annotations, as
    plotly.subplots.make_subplots lays them out) and each cell's (x axis, y axis) names for
    traces, cells counted from 1, top left first."""
    width = (1 - h_spacing * (cols - 1)) / cols
    height = (1 - v_spacing * (rows - 1)) / rows
    layout: dict = {"annotations": []}
    axes = {}
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c + 1
            suffix = "" if n == 1 else str(n)
            x0 = c * (width + h_spacing)
            y1 = 1 - r * (height + v_spacing)
            layout[f"xaxis{suffix}"] = {"anchor": f"y{suffix}", "domain": [x0, x0 + width]}
            layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": [y1 - height, y1]}
            axes[(r + 1, c + 1)] = (f"x{suffix}", f"y{suffix}")
            if n <= len(titles):
                layout["annotations"].append(
                    {
                        "font": {"size": 16},
                        "showarrow": False,
                        "text": titles[n - 1],
                        "x": x0 + width / 2,
                        "xanchor": "center",
                        "xref": "paper",
                        "y": y1,
                        "yanchor": "bottom",
                        "yref": "paper",
                    }
                )
    return layout, axes


def type_shares_figure(types: list[TypeStats]) -> dict:
    """Grouped bars per job type: share of GPU jobs and share of GPU time (%)."""
    labels = [t.label for t in types]
    data = []
    for name, values, colour in (
        ("share of GPU jobs", [t.count_share for t in types], "#9ab3d9"),
        ("share of GPU time", [t.gpu_time_share for t in types], "#2458b3"),
    ):
        pct = [100 * v if v is not None else None for v in values]
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": labels,
                "y": pct,
                "marker": {"color": colour},
                "text": [f"{v:.1f}%" if v is not None else "" for v in pct],
                "textposition": "outside",
                "cliponaxis": False,
                "hovertemplate": f"%{{x}}: %{{y:.2f}}% {name}<extra></extra>",
            }
        )
    layout = {"barmode": "group", "yaxis": {"title": {"text": "%"}, "range": [0, 105]}}
    return _done(data, layout, 380)


def cdf_figure(
    cdfs: dict[str, list[tuple[float, float]]], *, x_title: str, log_x: bool = True
) -> dict:
    """One CDF line per job type (and "all", bold); y in % of jobs."""
    data = []
    for job_type, points in cdfs.items():
        is_all = job_type == "all"
        data.append(
            {
                "type": "scatter",
                "name": TYPE_LABELS.get(job_type, job_type),
                "x": [x for x, _ in points],
                "y": [100 * y for _, y in points],
                "mode": "lines+markers" if len(points) < 30 else "lines",
                "marker": {"size": 4},
                "line": {
                    "color": TYPE_COLOURS.get(job_type),
                    "width": 3 if is_all else 1.8,
                    "dash": "dot" if is_all else "solid",
                },
                "hovertemplate": f"{TYPE_LABELS.get(job_type, job_type)}: "
                "%{y:.1f}% of jobs below %{x:,}<extra></extra>",
            }
        )
    layout = {
        "xaxis": {"title": {"text": x_title}, "type": "log" if log_x else "linear"},
        "yaxis": {"title": {"text": "CDF (% of GPU jobs)"}, "range": [0, 101]},
    }
    return _done(data, layout, 380)


def states_figure(
    site: str,
    count_shares: dict[str, float | None],
    time_shares: dict[str, float | None],
    reference: list[dict],
) -> dict:
    """Final states by count and by GPU time: the site beside the reference traces."""
    layout, axes = _grid(
        1, 2, ["share of GPU jobs", "share of GPU time"], h_spacing=0.04, v_spacing=0.0
    )
    layout["yaxis2"].update(matches="y", showticklabels=False)  # shared y axes
    data = []
    sources = [(site, count_shares, time_shares, SITE_COLOUR)]
    for row in reference:
        if row.get("complete_rate_gpu") is None:
            continue  # PAI has no final states in cluster_summary.csv
        sources.append(
            (
                row["id"],
                {g: row[f"{_prefix(g)}_rate_gpu"] for g in FINAL_GROUPS},
                {g: row[f"{_prefix(g)}_rate_gpu_time"] for g in FINAL_GROUPS},
                REFERENCE_STYLE.get(row["id"], {}).get("color", "#999"),
            )
        )
    for col, pick in ((1, 1), (2, 2)):
        for name, counts, times, colour in sources:
            shares = counts if pick == 1 else times
            y = [100 * shares[g] if shares.get(g) is not None else None for g in FINAL_GROUPS]
            xaxis, yaxis = axes[(1, col)]
            data.append(
                {
                    "type": "bar",
                    "name": name,
                    "x": list(FINAL_GROUPS),
                    "y": y,
                    "marker": {"color": colour, "opacity": 1.0 if name == site else 0.55},
                    "legendgroup": name,
                    "showlegend": col == 1,
                    "hovertemplate": f"{name}: %{{y:.1f}}%<extra>%{{x}}</extra>",
                    "xaxis": xaxis,
                    "yaxis": yaxis,
                }
            )
    layout["barmode"] = "group"
    layout["yaxis"].update(title={"text": "%"}, range=[0, 100])
    return _done(data, layout, 420, subplot_titles=True)


def _prefix(group: str) -> str:
    return {"completed": "complete", "cancelled": "cancel", "failed": "fail"}[group]


TELEMETRY_PANELS: tuple[tuple[str, str], ...] = (
    ("gpu_util", "GPU utilization (%)"),
    ("sm_active", "SM activity (%)"),
    ("mem_used", "GPU memory used (GiB)"),
    ("power_w", "GPU power (W)"),
)


def telemetry_figure(site: str, cdfs: TelemetryCdfs, reference: dict[str, list[dict]]) -> dict:
    """2 x 2 CDFs (GPU util, SM activity, memory, power): the site bold, Acme curves dashed."""
    layout, axes = _grid(
        2, 2, [title for _, title in TELEMETRY_PANELS], h_spacing=0.07, v_spacing=0.16
    )
    data = []
    shown: set[str] = set()
    for i, (metric, title) in enumerate(TELEMETRY_PANELS):
        xaxis, yaxis = axes[divmod(i, 2)[0] + 1, i % 2 + 1]
        for ref in reference.get(metric, []):
            name = ref["cluster"]
            scale = GIB_PER_80GIB_PCT if metric == "mem_used" else 1.0
            data.append(
                {
                    "type": "scatter",
                    "name": f"{name} (Acme paper)" if name in ("Seren", "Kalos") else name,
                    "x": [v * scale for v, _ in ref["points"]],
                    "y": [p for _, p in ref["points"]],
                    "mode": "lines",
                    "line": {**REFERENCE_STYLE.get(name, {}), "width": 1.6},
                    "legendgroup": name,
                    "showlegend": name not in shown,
                    "hovertemplate": f"{name}: %{{y:.1f}}% ≤ %{{x:,.1f}}<extra>{title}</extra>",
                    "xaxis": xaxis,
                    "yaxis": yaxis,
                }
            )
            shown.add(name)
        points = cdfs.curves.get(metric, [])
        data.append(
            {
                "type": "scatter",
                "name": site,
                "x": [v for v, _ in points],
                "y": [100 * p for _, p in points],
                "mode": "lines",
                "line": {"color": SITE_COLOUR, "width": 3},
                "legendgroup": "site",
                "showlegend": i == 0,
                "hovertemplate": f"{site}: %{{y:.1f}}% ≤ %{{x:,.1f}}<extra>{title}</extra>",
                "xaxis": xaxis,
                "yaxis": yaxis,
            }
        )
        suffix = xaxis[1:]
        layout[f"xaxis{suffix}"]["title"] = {"text": title}
        layout[f"yaxis{suffix}"].update(title={"text": "CDF (%)"}, range=[0, 101])
    return _done(data, layout, 760, subplot_titles=True)


def allocation_timeline(allocations: list[AllocationRow], now: datetime) -> dict:
    """One bar per allocation on its node x GPU row, from start to end (open: to now)."""
    rows = [a.label for a in allocations]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "y": rows,
            "base": [a.start.isoformat() for a in allocations],
            "x": [((a.end or now) - a.start).total_seconds() * 1000 for a in allocations],
            "marker": {"color": ["#2458b3" if a.end else "#21908d" for a in allocations]},
            "customdata": [
                [a.start.strftime("%Y-%m-%d %H:%M:%S"), a.end and a.end.strftime("%H:%M:%S")]
                for a in allocations
            ],
            "hovertemplate": "%{y}<br>%{customdata[0]} → %{customdata[1]}<extra></extra>",
            "showlegend": False,
        }
    ]
    layout = {
        "xaxis": {"type": "date", "title": {"text": "time (UTC)"}},
        "yaxis": {"type": "category", "autorange": "reversed", "automargin": True},
        "bargap": 0.25,
    }
    return _done(data, layout, 90 + 26 * max(len(rows), 3))


# --- The job page at any size (webapp/jobs/job_page.py computes what these draw) ---------------

_BAND_FILL = "rgba(36, 88, 179, 0.18)"
_BAND_LINE = "#2458b3"
OUTLIER_COLOURS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def allocation_heatmap(edges: list[datetime], nodes: list[NodeAllocation]) -> dict:
    """Node x time: how many of each node's GPUs the job held (0 = none, grey-white)."""
    most = max((n.gpus for n in nodes), default=1)
    data = [
        {
            "type": "heatmap",
            "x": [t.isoformat() for t in edges],
            "y": [n.hostname for n in nodes],
            "z": [n.held for n in nodes],
            "zmin": 0,
            "zmax": max(most, 1),
            "colorscale": [[0, "#f3f4f7"], [0.001, "#c6dbef"], [1, "#2458b3"]],
            "colorbar": {"title": {"text": "GPUs held"}, "thickness": 12},
            "hovertemplate": "%{y}<br>%{x}<br>%{z} GPUs held<extra></extra>",
            "xgap": 0,
            "ygap": 1 if len(nodes) <= 64 else 0,
        }
    ]
    layout = {
        "xaxis": {"type": "date", "title": {"text": "time (UTC)"}},
        "yaxis": {
            "type": "category",
            "autorange": "reversed",
            "automargin": True,
            # Past 40 rows the names overlap: hover says which node a row is.
            "showticklabels": len(nodes) <= 40,
            "title": {"text": f"{len(nodes):,} nodes" if len(nodes) > 40 else ""},
        },
    }
    return _done(data, layout, 110 + min(20 * max(len(nodes), 3), 360))


def bands_figure(bands: JobBands, labels: dict[int, str]) -> dict:
    """One panel per metric: the job's GPUs from lowest to highest (shaded), their median
    (line) and each outlier GPU as its own line; `labels`: alloc id -> "node GPU i"."""
    metrics = list(SERIES_AXES)
    layout, axes = _grid(len(metrics), 1, [], h_spacing=0.0, v_spacing=0.035)
    x = [t.isoformat() for t in bands.ts]
    data: list[dict] = []
    colour_of = {
        alloc: OUTLIER_COLOURS[i % len(OUTLIER_COLOURS)] for i, alloc in enumerate(bands.lines)
    }
    for row, metric in enumerate(metrics, start=1):
        title, convert = SERIES_AXES[metric]
        xaxis, yaxis = axes[(row, 1)]
        band = bands.bands[metric]

        def conv(values: list[float | None], convert=convert) -> list[float | None]:
            return [None if v is None else round(convert(v), 3) for v in values]

        common = {"x": x, "xaxis": xaxis, "yaxis": yaxis, "mode": "lines", "type": "scatter"}
        data.append(
            {
                **common,
                "name": "lowest GPU",
                "y": conv(band.lo),
                "line": {"width": 0, "color": _BAND_LINE},
                "legendgroup": "band",
                "showlegend": False,
                "hovertemplate": "lowest: %{y:,.1f}<extra></extra>",
            }
        )
        data.append(
            {
                **common,
                "name": "lowest to highest GPU",
                "y": conv(band.hi),
                "fill": "tonexty",
                "fillcolor": _BAND_FILL,
                "line": {"width": 0, "color": _BAND_LINE},
                "legendgroup": "band",
                "showlegend": row == 1,
                "hovertemplate": "highest: %{y:,.1f}<extra></extra>",
            }
        )
        data.append(
            {
                **common,
                "name": "median GPU",
                "y": conv(band.median),
                "line": {"width": 2, "color": _BAND_LINE},
                "legendgroup": "median",
                "showlegend": row == 1,
                "hovertemplate": "median: %{y:,.1f}<extra>" + title + "</extra>",
            }
        )
        for alloc, (ts, series) in bands.lines.items():
            label = labels.get(alloc, str(alloc))
            data.append(
                {
                    **common,
                    "x": [t.isoformat() for t in ts],
                    "name": label,
                    "y": conv(series[metric]),
                    "line": {"width": 1.2, "color": colour_of[alloc]},
                    "legendgroup": label,
                    "showlegend": row == 1,
                    "hovertemplate": f"{label}: %{{y:,.1f}}<extra></extra>",
                }
            )
        suffix = xaxis[1:]
        layout[f"yaxis{suffix}"].update(title={"text": title}, rangemode="tozero")
        layout[f"xaxis{suffix}"].update(type="date", showticklabels=row == len(metrics))
        if row > 1:
            layout[f"xaxis{suffix}"]["matches"] = "x"
    layout["yaxis"]["range"] = [0, 100]
    layout["yaxis2"]["range"] = [0, 100]
    layout["hovermode"] = "x unified"
    return _done(data, layout, 150 * len(metrics) + 110)


def node_energy_figure(nodes: list[NodeEnergy]) -> dict:
    """One bar per node: its GPUs' energy over the job (kWh)."""
    data = [
        {
            "type": "bar",
            "x": [n.hostname for n in nodes],
            "y": [round(n.kwh, 4) for n in nodes],
            "customdata": [len(n.gpus) for n in nodes],
            "marker": {"color": "#2458b3"},
            "hovertemplate": "%{x}: %{y:,.3f} kWh on %{customdata} GPUs<extra></extra>",
            "showlegend": False,
        }
    ]
    layout = {
        "xaxis": {
            "type": "category",
            "showticklabels": len(nodes) <= 40,
            "title": {"text": "node"},
        },
        "yaxis": {"title": {"text": "GPU energy (kWh)"}, "rangemode": "tozero"},
        "bargap": 0.1 if len(nodes) > 40 else 0.3,
    }
    return _done(data, layout, 300)
