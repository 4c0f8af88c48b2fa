"""Plotly figures of the evaluation page, built server-side (plain dicts for `json_script`)
and drawn by the vendored plotly.js, like webapp/recovery/figures.py: each plan as a Gantt
chart (one lane per GPU, then the CPU jobs), predicted against actual makespan, GPU time by
phase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from webapp.core.charts import NO_DATA_COLOUR, figure_json, plain

# One colour per phase, the same on every figure (Plotly's qualitative palette): loading
# orange, inference blue, metrics green, idle grey.
PHASE_COLOURS = {
    "load": "#ff7f0e",
    "infer": "#1f77b4",
    "metrics": "#2ca02c",
    "idle": NO_DATA_COLOUR,
}
PHASE_LABELS = {"load": "loading", "infer": "inference", "metrics": "metrics", "idle": "idle"}
ACTUAL_COLOUR = "#d62728"
# A Gantt chart of hundreds of nodes stays one screen and a half tall.
GANTT_MAX_HEIGHT = 1400


def _lanes(jobs: Sequence[Mapping]) -> tuple[list[tuple[str, Mapping]], list[str]]:
    """(lane, job) per job and the lanes in order: a lane per GPU (`n0 gpu 3`), and CPU
    lanes per node packed greedily (`n0 cpu 1`...) so overlapping CPU jobs do not hide each
    other; the loader has its own lane."""
    placed: list[tuple[str, Mapping]] = []
    gpu_lanes: set[tuple[int, int]] = set()
    cpu_free: dict[int, list[float]] = {}
    for job in sorted(jobs, key=lambda j: (j["start_s"], j["key"])):
        node = job["node"]
        if job["gpu"] is not None:
            gpu_lanes.add((node, job["gpu"]))
            placed.append((f"n{node} gpu {job['gpu']}", job))
        elif job["kind"] == "load":
            placed.append((f"n{node} loader", job))
        else:
            frees = cpu_free.setdefault(node, [])
            lane = next((i for i, t in enumerate(frees) if t <= job["start_s"]), None)
            if lane is None:
                frees.append(job["end_s"])
                lane = len(frees) - 1
            else:
                frees[lane] = job["end_s"]
            placed.append((f"n{node} cpu {lane + 1}", job))
    order: list[str] = []
    nodes = sorted({j["node"] for j in jobs})
    for n in nodes:
        order.append(f"n{n} loader")
        order += [f"n{n} gpu {g}" for nn, g in sorted(gpu_lanes) if nn == n]
        order += [f"n{n} cpu {i + 1}" for i in range(len(cpu_free.get(n, [])))]
    used = {lane for lane, _ in placed}
    return placed, [lane for lane in order if lane in used]


def gantt_figure(
    plan: Mapping, *, actual_makespan_s: float | None = None, x_max_s: float | None = None
) -> dict:
    """A plan as a Gantt chart: each job a bar per phase on its lane; the predicted makespan
    (and the measured one, when the run measured it) as vertical lines. `x_max_s` gives two
    charts side by side one time axis, so the shorter plan looks shorter."""
    placed, lanes = _lanes(plan["plan"])
    fig = go.Figure()
    for phase in ("load", "infer", "metrics"):
        ys, xs, bases, texts = [], [], [], []
        for lane, job in placed:
            seconds = job["phases"].get(phase)
            if not seconds:
                continue
            # The phases of a job run in this order: loading, inference, metrics.
            before = sum(
                job["phases"].get(p, 0.0)
                for p in ("load", "infer", "metrics")[: ("load", "infer", "metrics").index(phase)]
            )
            start = job["end_s"] - sum(job["phases"].values()) + before
            ys.append(lane)
            xs.append(seconds)
            bases.append(start)
            trial = "+".join(
                name if shards == 1 else f"{name}[{shard}/{shards}]"
                for name, shard, shards in job["datasets"]
            )
            texts.append(plain(f"{job['key']} ({job['kind']}): {trial or 'model copy'}"))
        if ys:
            fig.add_trace(
                go.Bar(
                    y=ys,
                    x=xs,
                    base=bases,
                    orientation="h",
                    name=PHASE_LABELS[phase],
                    marker={"color": PHASE_COLOURS[phase], "line": {"width": 0.5, "color": "#fff"}},
                    hovertext=texts,
                    hovertemplate="%{hovertext}<br>%{base:.1f} s to %{x:.1f} s more<extra>"
                    + PHASE_LABELS[phase]
                    + "</extra>",
                )
            )
    lines = [("predicted", plan["makespan_s"], "#444", "dash")]
    if actual_makespan_s is not None:
        lines.append(("measured", actual_makespan_s, ACTUAL_COLOUR, "solid"))
    for label, x, colour, dash in lines:
        fig.add_shape(
            type="line", x0=x, x1=x, y0=0, y1=1, yref="paper", line={"color": colour, "dash": dash}
        )
        fig.add_annotation(
            x=x,
            y=1,
            yref="paper",
            text=f"{label} {x:.1f} s",
            showarrow=False,
            yanchor="bottom",
            xanchor="right",
        )
    fig.update_layout(
        barmode="overlay",
        xaxis={
            "title": "seconds from submission",
            "rangemode": "tozero",
            **({"range": [0, x_max_s * 1.03]} if x_max_s else {}),
        },
        yaxis={"categoryorder": "array", "categoryarray": lanes[::-1], "automargin": True},
        bargap=0.25,
    )
    # 16 px a lane, up to GANTT_MAX_HEIGHT: past that, lanes thin out (hover still names them).
    return figure_json(fig, min(GANTT_MAX_HEIGHT, max(260, 60 + 16 * len(lanes))))


def makespan_figure(prediction: Mapping, executed: str, actual_s: float | None) -> dict:
    """Predicted makespan of both plans, and the measured one of the plan that ran."""
    fig = go.Figure()
    kinds = ["baseline", "decoupled"]
    fig.add_trace(
        go.Bar(
            x=kinds,
            y=[prediction[k]["makespan_s"] for k in kinds],
            name="predicted",
            marker={"color": "#7f7f7f"},
            hovertemplate="%{x}: %{y:.1f} s predicted<extra></extra>",
        )
    )
    if actual_s is not None:
        fig.add_trace(
            go.Bar(
                x=[executed],
                y=[actual_s],
                name="measured",
                marker={"color": ACTUAL_COLOUR},
                hovertemplate="%{x}: %{y:.1f} s measured<extra></extra>",
            )
        )
    fig.update_layout(barmode="group", yaxis={"title": "makespan (s)", "rangemode": "tozero"})
    return figure_json(fig, 300)


def gpu_time_figure(prediction: Mapping, executed: str, actual: Mapping[str, float] | None) -> dict:
    """GPU time by phase (loading, inference, metrics, idle), GPU-hours, stacked per plan."""
    bars = [(f"{k} (predicted)", prediction[k]["gpu_time_s"]) for k in ("baseline", "decoupled")]
    if actual:
        bars.append((f"{executed} (measured)", actual))
    fig = go.Figure()
    for phase in ("load", "infer", "metrics", "idle"):
        fig.add_trace(
            go.Bar(
                x=[label for label, _ in bars],
                y=[values.get(phase, 0.0) / 3600 for _, values in bars],
                name=PHASE_LABELS[phase],
                marker={"color": PHASE_COLOURS[phase]},
                hovertemplate="%{x}: %{y:.3f} GPU-h " + PHASE_LABELS[phase] + "<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack", yaxis={"title": "GPU-hours"})
    return figure_json(fig, 300)
