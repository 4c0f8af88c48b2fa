"""The live pages in a real Chromium: login, the overview heatmap and its refresh, node and GPU."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import make_batch
from webapp.fleet import services as fleet_services
from webapp.telemetry.services import samples_ingest

pytestmark = pytest.mark.browser

# Per heatmap: GPUs with a cell (utilization or grey "no data"), errored GPUs marked, and
# whether plotly.js drew the heatmap image.
_HEATMAP_STATE = """
() => Array.from(document.querySelectorAll('.heatmap')).map(gd => {
  const cells = (t) => (t.z || []).flat().filter(v => v !== null).length;
  const heatmaps = (gd.data || []).filter(t => t.type === 'heatmap');
  return {
    cluster: gd.dataset.cluster,
    cells: heatmaps.reduce((n, t) => n + cells(t), 0),
    utilCells: heatmaps.length ? cells(heatmaps[0]) : 0,
    errored: (gd.data || []).filter(t => t.type === 'scatter').reduce((n, t) => n + t.x.length, 0),
    drawn: gd.querySelectorAll('g.hm image').length,
    z: heatmaps.length ? heatmaps[0].z : null,
  };
})
"""


def _heatmaps(page) -> dict[str, dict]:
    return {h["cluster"]: h for h in page.evaluate(_HEATMAP_STATE)}


def test_anonymous_visitor_is_redirected_to_login(page, live_server, screenshot_dir, page_log):
    page.goto(f"{live_server.url}/")
    assert re.search(r"/login/\?next=/$", page.url)
    assert page.locator("h1").inner_text() == "Log in to Vigil"
    assert page.locator("input[name=password]").is_visible()
    page.screenshot(path=screenshot_dir / "login.png")
    assert page_log.errors == []


def test_login_then_overview_heatmap_has_one_cell_per_gpu(
    page, live_server, live_fleet, operator_login, screenshot_dir, page_log
):
    operator_login("/")
    assert page.url == f"{live_server.url}/"
    assert page.locator("h1").inner_text() == "Fleet overview"
    page.wait_for_function(
        "document.querySelectorAll('.heatmap g.hm image').length >= 2", timeout=15_000
    )

    maps = _heatmaps(page)
    assert set(maps) == {"alpha", "beta"}
    assert maps["alpha"]["cells"] == 16 and maps["alpha"]["utilCells"] == 8
    assert maps["alpha"]["errored"] == 2
    assert maps["beta"]["cells"] == 4 and maps["beta"]["utilCells"] == 4
    assert all(m["drawn"] >= 1 for m in maps.values())
    # Counts table, colour legend, last-updated indicator.
    row = page.locator("#cluster-table tr[data-cluster=alpha]")
    assert row.locator("[data-field=busy]").inner_text() == "4"
    assert row.locator("[data-field=stale]").inner_text() == "8"
    assert row.locator("[data-field=power_kw]").inner_text() == "3.7"
    assert page.locator("#heatmap-0 .legend").text_content().count("erroring") == 1
    assert "GPU util (%)" in page.locator("#heatmap-0 .colorbar").text_content()
    assert page.locator("#last-updated").inner_text().startswith("updated ")
    page.screenshot(path=screenshot_dir / "overview.png", full_page=True)

    assert page_log.errors == []
    assert page_log.foreign_requests == []  # nothing from a CDN


def test_overview_refreshes_without_reload(page, live_server, live_fleet, operator_login):
    operator_login("/")
    page.wait_for_function("document.querySelectorAll('.heatmap g.hm image').length >= 2")
    page.evaluate("window.__notReloaded = true")

    # beta's node reports again: all four GPUs now idle at 3 %.
    token = fleet_services.node_token_issue("beta", "gpu-b-01")
    batch = make_batch("beta", "gpu-b-01", token, gpus=4, uuid_prefix="GPU-beta-gpu-b-01")
    for row in batch["samples"]:
        row[2] = 3.0  # gpu_util
    samples_ingest(json.dumps(batch))

    page.wait_for_function(
        """() => {
          const gd = document.querySelector('.heatmap[data-cluster=beta]');
          return gd.data[0].z[0].every(v => v === 3);
        }""",
        timeout=15_000,
    )
    assert page.evaluate("window.__notReloaded") is True
    row = page.locator("#cluster-table tr[data-cluster=beta]")
    assert row.locator("[data-field=busy]").inner_text() == "0"
    assert row.locator("[data-field=idle]").inner_text() == "4"


def test_clicking_a_cell_opens_its_node(page, live_server, live_fleet, operator_login):
    operator_login("/")
    page.wait_for_function("document.querySelectorAll('.heatmap g.hm image').length >= 2")
    # Centre of alpha's cell (node gpu-a-01, GPU 0), in page coordinates.
    x, y = page.evaluate(
        """() => {
          const gd = document.querySelector('.heatmap[data-cluster=alpha]');
          const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
          const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
          return [box.left + xa.l2p(0), box.top + ya.l2p(0)];  // row 0 begins with gpu-a-01
        }"""
    )
    page.mouse.move(x, y)
    page.wait_for_selector(".hoverlayer .hovertext")
    hover = page.locator("#heatmap-0 .hoverlayer").text_content()
    assert "gpu-a-01" in hover and "GPU 0" in hover and "95 %" in hover
    page.mouse.click(x, y)
    page.wait_for_url(f"**/nodes/{live_fleet.a01.id}/")
    assert page.locator("h1").inner_text().startswith("Node gpu-a-01")


def test_overview_names_each_node_and_tells_held_idle_gpus_from_free_ones(
    page, live_server, live_fleet, operator_login, screenshot_dir, page_log
):
    """Eight nodes in alpha (four columns of two rows), gpu-a-01 drained by the scheduler and
    job 77 holding its GPUs 0, 1 (busy) and 4, 5 (idle)."""
    from tests.telemetry.conftest import seed_node
    from tests.telemetry.helpers import gpus_hold, node_a01_drain

    for n in range(3, 9):
        seed_node("alpha", f"gpu-a-0{n}", utils=[70, 0, 90, 40, 95, 3, 88, 60])
    gpus_hold(live_fleet, "77", [0, 1, 4, 5])
    node_a01_drain(live_fleet)
    page.set_viewport_size({"width": 1440, "height": 900})
    operator_login("/")
    page.wait_for_function(
        "document.querySelectorAll('.heatmap g.hm image').length >= 2", timeout=15_000
    )
    # One label per node, the drained one saying so (draining, as Slurm says, while job 77
    # still runs on it); gpu-a-02 stopped reporting.
    labels = page.locator("#heatmap-0 .yaxislayer-above text").all_text_contents()
    assert sorted(labels) == sorted(
        ["gpu-a-01 · draining", "gpu-a-02 · stale"] + [f"gpu-a-0{n}" for n in range(3, 9)]
    )
    # The two idle GPUs job 77 holds are drawn apart from free idle ones, with a legend entry.
    held = page.evaluate(
        """() => document.getElementById('heatmap-0').data
          .filter(t => t.name === 'idle, held by a job')
          .reduce((n, t) => n + t.z.flat().filter(v => v !== null).length, 0)"""
    )
    assert held == 2
    assert "idle, held by a job" in page.locator("#heatmap-0 .legend").text_content()
    page.screenshot(path=screenshot_dir / "overview-states.png", full_page=True)

    # The hover of gpu-a-01's GPU 4 names the job and the node's state.
    x, y = page.evaluate(
        """() => {
          const gd = document.getElementById('heatmap-0');
          const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
          const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
          return [box.left + xa.l2p(4), box.top + ya.l2p(0)];
        }"""
    )
    page.mouse.move(x, y)
    page.wait_for_selector("#heatmap-0 .hoverlayer .hovertext")
    hover = page.locator("#heatmap-0 .hoverlayer").text_content()
    assert "gpu-a-01" in hover and "GPU 4" in hover
    assert "job 77" in hover and "idle, held by a job" in hover and "node draining" in hover
    assert page_log.errors == []


def _figure_state(page) -> dict:
    return page.evaluate(
        """() => {
          const gd = document.getElementById('series-figure');
          const lines = Array.from(gd.querySelectorAll('g.scatterlayer path.js-line'))
            .filter(p => (p.getAttribute('d') || '').length > 10);
          return {traces: gd.data.length, lines: lines.length,
                  points: gd.querySelectorAll('g.scatterlayer g.points path.point').length,
                  panels: gd.querySelectorAll('g.cartesianlayer > g.subplot').length};
        }"""
    )


def test_node_and_gpu_pages_draw_their_figures(
    page, live_server, live_fleet, operator_login, screenshot_dir, page_log
):
    operator_login(f"/nodes/{live_fleet.a01.id}/")
    page.wait_for_selector("#series-figure .main-svg")
    state = _figure_state(page)
    assert (state["traces"], state["lines"], state["panels"]) == (40, 40, 5)
    assert state["points"] == 40 * 3
    assert page.locator("#gpu-table tbody tr").count() == 8
    page.screenshot(path=screenshot_dir / "node.png", full_page=True)

    page.click("#gpu-table tbody tr:nth-child(3) td a")  # GPU 2: erroring
    page.wait_for_selector("#series-figure .main-svg")
    assert page.locator("h1").inner_text() == "gpu-a-01 · GPU 2 erroring"
    assert "double-bit ECC" in page.locator(".problems").inner_text()
    state = _figure_state(page)
    assert (state["traces"], state["lines"], state["panels"]) == (5, 5, 5)
    latest = page.locator("#latest").inner_text()
    assert "n/a (not supported on NVIDIA H100 80GB HBM3)" in latest
    assert "85.0 %" in latest
    page.screenshot(path=screenshot_dir / "gpu.png", full_page=True)

    page.click("nav.ranges a:has-text('last day')")
    page.wait_for_selector("#series-figure .main-svg")
    assert "1-minute rollup" in page.locator(".source").inner_text()
    state = _figure_state(page)
    assert state["traces"] == 5 and state["points"] >= 5  # one or two rollup minutes

    page.goto(f"{live_server.url}/clusters/alpha/nodes/")
    assert page.locator("#node-table tbody tr").count() == 2
    page.screenshot(path=screenshot_dir / "nodes.png", full_page=True)

    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_node_page_links_the_job_holding_each_gpu(
    page, live_server, live_fleet, operator_login, screenshot_dir, page_log
):
    from tests.telemetry.helpers import node_history

    history = node_history(live_fleet)
    operator_login(f"/nodes/{live_fleet.a01.id}/")
    jobs = page.locator("#gpu-table tbody td.job")
    assert [jobs.nth(i).inner_text().split()[0] for i in range(8)] == ["77"] * 4 + ["none"] * 4
    assert "Xid 79" in page.locator("#gpu-error-table").inner_text()
    assert "Drain node" in page.locator("#recovery-table").inner_text()
    page.screenshot(path=screenshot_dir / "node-with-jobs.png", full_page=True)
    jobs.nth(0).locator("a").click()
    page.wait_for_url(f"**/jobs/{history['current'].id}/")
    assert page.locator("h1").inner_text().startswith("Job 77")
    assert page_log.errors == []


def _fleet_payload(gpus: int, clusters: tuple[str, ...]) -> dict:
    """The overview payload of a synthetic fleet of `gpus` GPUs (no database: the browser's
    part is what this measures), made by the same function as the real one."""
    import random
    from types import SimpleNamespace

    from django.utils import timezone

    from webapp.pages.overview import overview_payload
    from webapp.telemetry.selectors import LatestGpu, clusters_summarize

    rng, now = random.Random(17), timezone.now()
    rows = []
    for n in range(gpus // 8):
        c = n % len(clusters)
        for i in range(8):
            stale = n % 50 == 7
            values = (
                {}
                if stale
                else {
                    "gpu_util": float(rng.randint(60, 100) if rng.random() < 0.8 else 2),
                    "power_w": rng.uniform(80, 700),
                    "sm_active": rng.random(),
                    "gpu_temp_c": 50,
                    "fb_used_bytes": 40 * 2**30,
                    "ecc_dbe_vol": 1 if rng.random() < 0.001 else 0,
                }
            )
            rows.append(
                LatestGpu(
                    gpu_id=n * 8 + i,
                    index=i,
                    uuid=f"GPU-{n}-{i}",
                    model="H100",
                    node_id=n,
                    hostname=f"{clusters[c]}-n{n // len(clusters):05d}",
                    cluster_id=c,
                    cluster=clusters[c],
                    ts=None if stale else now,
                    values=values,
                )
            )
    cluster_objs = [SimpleNamespace(id=i, name=name) for i, name in enumerate(clusters)]
    return overview_payload(
        clusters_summarize(cluster_objs, rows),
        rows,
        holders={},
        now=now,
        node_url=lambda i: f"/nodes/{i}/",
        busy_util_pct=50,
        stale_after_s=60,
    )


def test_overview_of_47040_gpus_draws_one_cell_per_node(
    page, live_server, live_fleet, operator_login, screenshot_dir, page_log
):
    """The refresh brings a 47,040-GPU fleet (two clusters of 23,520): one cell per node."""
    payload = json.dumps(_fleet_payload(47_040, ("alpha", "beta")))
    page.route(
        "**/api/v1/overview.json",
        lambda route: route.fulfill(status=200, content_type="application/json", body=payload),
    )
    operator_login("/")
    page.wait_for_function(
        "() => (document.querySelector('.heatmap[data-cluster=alpha]') || {dataset: {}})"
        ".dataset.level === 'node'",
        timeout=20_000,
    )
    page.wait_for_function("document.querySelectorAll('.heatmap g.hm image').length >= 2")
    maps = _heatmaps(page)
    assert maps["alpha"]["cells"] == maps["beta"]["cells"] == 47_040 // 8 // 2
    row = page.locator("#cluster-table tr[data-cluster=alpha]")
    assert row.locator("[data-field=gpus]").inner_text() == "23,520"
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 3 * 900, height  # two clusters of 2,940 nodes in under three screens
    page.screenshot(path=screenshot_dir / "overview-47040.png", full_page=True)
    assert page_log.errors == []
