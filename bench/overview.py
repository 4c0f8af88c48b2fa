"""The fleet overview's payload at a datacenter's size, against the payload it replaced, in one run.

    .venv/bin/python bench/overview.py [--gpus 4704] [--clusters 2] [--repeat 5]

Starts its own embedded PostgreSQL and Redis in a temporary folder, migrates, then builds the fleet
through Vigil's own services: a node token per node and one ingested batch per node
(`samples_ingest`, the worker's code path), 8 GPUs a node, a sample each; a few nodes of each
cluster are left stale and a few GPUs report ECC errors; a job holds each node's busy GPUs now
and --history ended allocations per GPU lie behind it (the overview names the job holding each
GPU: one query over the allocations). The stale window is an hour here
(VIGIL_STALE_AFTER_S), so that the nodes built first still report when the pages are measured. Then,
as a logged-in operator through Django's test client (the whole middleware stack, gzip included):
  - after: GET /api/v1/overview.json with Accept-Encoding: gzip, the bytes sent and the time;
  - the page: GET / (the HTML with the first payload and the figures' look);
  - baseline: the payload as it was before the compact grid (a plotly heatmap per cluster with the
    hover text of every cell, and the per-GPU list), built from the same selectors here, sent
    without gzip as it was, and its size had it been gzipped.
Times are medians of --repeat runs and include the selectors (the latest sample of every GPU).
Last line: JSON with gpus, overview_bytes (gzip, as sent), overview_raw_bytes, overview_ms,
selectors_ms, holders_ms (the jobs holding GPUs now), page_bytes, baseline_bytes,
baseline_gzip_bytes, baseline_ms, bytes_ratio and ms_ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site  # noqa: E402 (after the path)

GPUS_PER_NODE = 8
STALE_AFTER_S = 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4704)
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--history", type=int, default=10, help="ended allocations per GPU")
    args = parser.parse_args()

    # Building 47,040 GPUs through ingest takes minutes: the stale window is widened to an
    # hour so that the first nodes built still count as reporting when the pages are measured.
    os.environ["VIGIL_STALE_AFTER_S"] = str(STALE_AFTER_S)
    # Production settings, as a deployed web process runs (no DEBUG query log).
    with bench_site():
        t0 = time.perf_counter()
        nodes = _build_fleet(args.gpus, args.clusters)
        _build_allocations(args.history)
        build_s = time.perf_counter() - t0
        print(f"{nodes} nodes built in {build_s:.0f} s", file=sys.stderr)
        print(json.dumps(_measure(args.repeat) | {"build_s": round(build_s, 1)}))


def _build_fleet(gpus: int, clusters: int) -> int:
    """Nodes of 8 GPUs split over the clusters, one batch each through samples_ingest_many (the
    worker's path, VIGIL_INGEST_GROUP batches a transaction); pseudo-random values (seeded), so
    that gzip sees numbers as varied as a real fleet's."""
    import random

    from collectors.schema import GPU_FIELD_NAMES
    from tests.helpers import make_batch
    from webapp.fleet.services import node_token_issue
    from webapp.telemetry.services import samples_ingest_many

    rng = random.Random(17)
    col = {name: 2 + GPU_FIELD_NAMES.index(name) for name in GPU_FIELD_NAMES}
    nodes = gpus // GPUS_PER_NODE
    group: list[str] = []
    for n in range(nodes):
        cluster = f"site{n % clusters}"
        hostname = f"{cluster}-n{n // clusters:05d}"
        token = node_token_issue(cluster, hostname)
        # Every 50th node last reported before the stale window; the rest a few seconds ago.
        now = time.time()
        t0 = now - STALE_AFTER_S - 300 if n % 50 == 7 else now - 5 - (n % 5)
        batch = make_batch(cluster, hostname, token, t0=t0, gpus=GPUS_PER_NODE)
        for row in batch["samples"]:
            busy = rng.random() < 0.8
            row[col["gpu_util"]] = float(rng.randint(60, 100) if busy else rng.randint(0, 5))
            row[col["power_w"]] = round(rng.uniform(350, 700) if busy else rng.uniform(60, 90), 3)
            row[col["gpu_temp_c"]] = rng.randint(35, 75)
            if rng.random() < 0.001:  # about one GPU in a thousand
                row[col["ecc_dbe_vol"]] = 1
        group.append(json.dumps(batch))
        if len(group) == 100 or n == nodes - 1:
            samples_ingest_many(group)
            group = []
    return nodes


def _build_allocations(history: int) -> None:
    """One running job per node holding its busy GPUs (util >= 50 %), and `history` ended jobs'
    allocations per GPU before it (bulk rows: what the overview reads, not how they came)."""
    from datetime import timedelta

    from django.utils import timezone

    from webapp.fleet.models import Gpu
    from webapp.jobs.models import Job, JobAllocation
    from webapp.telemetry.selectors import gpus_latest

    now = timezone.now()
    busy = {g.gpu_id for g in gpus_latest() if (g.value("gpu_util") or 0) >= 50}
    gpus = list(Gpu.objects.select_related("node").order_by("node_id", "index"))
    by_node: dict = {}
    for g in gpus:
        by_node.setdefault(g.node, []).append(g)
    jobs = []
    for node in by_node:
        for h in range(history + 1):
            jobs.append(
                Job(
                    cluster_id=node.cluster_id,
                    scheduler_id=f"{node.id}-{h}",
                    name=f"train-{node.hostname}-{h}",
                    user="bench",
                    state="running" if h == history else "completed",
                    start_at=now - timedelta(hours=2 * (history - h) + 1),
                )
            )
    Job.objects.bulk_create(jobs, batch_size=5000)
    rows, k = [], 0
    for node, mine in by_node.items():
        for h in range(history + 1):
            job, k = jobs[k], k + 1
            open_ = h == history
            for g in mine:
                if open_ and g.id not in busy:
                    continue
                rows.append(
                    JobAllocation(
                        job=job,
                        node=node,
                        gpu=g,
                        gpu_index=g.index,
                        start=job.start_at,
                        end=None if open_ else job.start_at + timedelta(hours=1),
                    )
                )
    JobAllocation.objects.bulk_create(rows, batch_size=10000)


def _measure(repeat: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_user("bench", password=secrets.token_hex(8))
    client = Client()
    client.force_login(user)

    def timed(fn) -> tuple[float, object]:
        times, out = [], None
        for _ in range(repeat):
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1000, out

    overview_ms, response = timed(
        lambda: client.get("/api/v1/overview.json", HTTP_ACCEPT_ENCODING="gzip")
    )
    assert response.status_code == 200 and response["Content-Encoding"] == "gzip"
    raw = gzip.decompress(response.content)
    payload = json.loads(raw)
    page_ms, page = timed(lambda: client.get("/", HTTP_ACCEPT_ENCODING="gzip"))
    assert page.status_code == 200
    baseline_ms, baseline = timed(_baseline_payload)
    from webapp.telemetry.selectors import clusters_overview

    selectors_ms, _ = timed(clusters_overview)
    from webapp.jobs.selectors import gpu_holders

    holders_ms, _ = timed(gpu_holders)
    levels = sorted({c["grid"]["level"] for c in payload["clusters"]})
    return {
        "gpus": sum(c["gpus"] for c in payload["clusters"]),
        "levels": levels,
        "overview_bytes": len(response.content),
        "overview_raw_bytes": len(raw),
        "overview_ms": round(overview_ms, 1),
        "selectors_ms": round(selectors_ms, 1),  # the latest sample of every GPU, both times
        "holders_ms": round(holders_ms, 1),
        "page_bytes": len(page.content),
        "page_ms": round(page_ms, 1),
        "baseline_bytes": len(baseline),
        "baseline_gzip_bytes": len(gzip.compress(baseline, 6)),
        "baseline_ms": round(baseline_ms, 1),
        "bytes_ratio": round(len(baseline) / len(response.content), 1),
        "ms_ratio": round(baseline_ms / overview_ms, 2),
    }


# --- The payload before the compact grid (webapp/telemetry/views.py and figures.py as they were) --

_HEATMAP_HOVER = (
    "<b>%{customdata[0]}</b> · GPU %{customdata[1]}<br>"
    "%{customdata[2]}<br>%{customdata[3]}<br>"
    "status: %{customdata[9]}<br>"
    "util: %{customdata[4]} · SM active: %{customdata[5]}<br>"
    "power: %{customdata[6]} · temp: %{customdata[7]}<br>"
    "memory used: %{customdata[8]}"
    "<extra></extra>"
)


def _baseline_payload() -> bytes:
    """The old overview.json body: a plotly figure per cluster, then every GPU."""
    from django.conf import settings
    from django.core.serializers.json import DjangoJSONEncoder
    from django.utils import timezone

    from webapp.core.units import iso_utc
    from webapp.telemetry.selectors import SERIES_METRICS, clusters_overview

    summaries, gpus = clusters_overview()
    node_url = lambda node_id: f"/nodes/{node_id}/"  # noqa: E731
    clusters = []
    for s in summaries:
        mine = [g for g in gpus if g.cluster_id == s.id]
        clusters.append(
            {
                "name": s.name,
                "gpus": s.gpus,
                "busy": s.busy,
                "idle": s.idle,
                "erroring": s.erroring,
                "stale": s.stale,
                "power_kw": round(s.power_kw, 3),
                "figure": _baseline_heatmap(mine, node_url, settings.VIGIL_STALE_AFTER_S),
            }
        )
    body = {
        "generated_at": timezone.now().isoformat(),
        "clusters": clusters,
        "gpus": [
            {
                "cluster": g.cluster,
                "node": g.hostname,
                "node_url": node_url(g.node_id),
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "status": g.status,
                "ts": iso_utc(g.ts),
                **{name: g.value(name) for name in SERIES_METRICS},
            }
            for g in gpus
        ],
    }
    return json.dumps(body, cls=DjangoJSONEncoder).encode()


def _baseline_heatmap(gpus, node_url, stale_after_s: int) -> dict:
    import plotly.graph_objects as go

    from webapp.core.charts import ERROR_COLOUR, NO_DATA_COLOUR, TEMPLATE, UTIL_COLOURSCALE
    from webapp.telemetry.choices import GpuStatus
    from webapp.telemetry.figures import gpu_hover_values

    hostnames = list(dict.fromkeys(g.hostname for g in gpus))
    row_of = {h: i for i, h in enumerate(hostnames)}
    width = max((g.index for g in gpus), default=-1) + 1
    util = [[None] * width for _ in hostnames]
    no_data = [[None] * width for _ in hostnames]
    custom = [[None] * width for _ in hostnames]
    err_x, err_y = [], []
    for g in gpus:
        r, c = row_of[g.hostname], g.index
        hover = gpu_hover_values(g)
        status = g.status
        if status == GpuStatus.STALE or g.value("gpu_util") is None:
            no_data[r][c] = 1
        else:
            util[r][c] = g.value("gpu_util")
        if status == GpuStatus.ERRORING:
            err_x.append(c)
            err_y.append(g.hostname)
        custom[r][c] = [
            g.hostname,
            g.index,
            g.uuid,
            g.model or "unknown model",
            hover["gpu_util"],
            hover["sm_active"],
            hover["power_w"],
            hover["gpu_temp_c"],
            hover["fb_used"],
            status if status != GpuStatus.STALE else f"stale (no sample in {stale_after_s} s)",
            node_url(g.node_id),
        ]
    x = list(range(width))
    fig = go.Figure()
    for name, z, scale in (
        ("GPU util (%)", util, UTIL_COLOURSCALE),
        ("no data", no_data, [[0, NO_DATA_COLOUR], [1, NO_DATA_COLOUR]]),
    ):
        fig.add_trace(
            go.Heatmap(
                name=name,
                z=z,
                x=x,
                y=hostnames,
                customdata=custom,
                colorscale=scale,
                hoverongaps=False,
                hovertemplate=_HEATMAP_HOVER,
                xgap=2,
                ygap=2,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=err_x,
            y=err_y,
            mode="markers",
            marker={"symbol": "x-thin", "size": 14, "line": {"width": 3, "color": ERROR_COLOUR}},
        )
    )
    fig.update_layout(template=TEMPLATE, height=95 + max(34 * len(hostnames), 100))
    return json.loads(fig.to_json())


if __name__ == "__main__":
    main()
