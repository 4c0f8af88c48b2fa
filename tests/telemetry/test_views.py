"""Live pages as a logged-in operator and as an anonymous visitor: overview, JSON, node, GPU."""

from __future__ import annotations

import csv
import io
import re
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse

from collectors.schema import GPU_FIELD_NAMES
from tests.telemetry.conftest import MODEL, seed_node
from tests.telemetry.helpers import node_history
from webapp.fleet.models import Gpu
from webapp.telemetry.selectors import gpu_sample_latest


def _csv(response) -> list[dict[str, str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def _urls(fleet) -> list[str]:
    gpu = fleet.gpu(fleet.a01, 0)
    return [
        reverse("pages:overview"),
        reverse("telemetry_api:overview_csv"),
        reverse("pages:node", args=[fleet.a01.id]),
        reverse("telemetry_api:node_csv", args=[fleet.a01.id]),
        reverse("telemetry:gpu", args=[gpu.id]),
        reverse("telemetry_api:gpu_csv", args=[gpu.id]),
        reverse("telemetry:nodes", args=["alpha"]),
        reverse("telemetry_api:nodes_csv", args=["alpha"]),
    ]


def test_anonymous_visitor_is_sent_to_login_from_every_page(client, small_fleet):
    for url in _urls(small_fleet):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


def test_anonymous_json_gets_401_not_a_login_page(client, small_fleet):
    response = client.get(reverse("pages_api:overview_json"))
    assert response.status_code == 401
    assert response.json()["login_url"] == reverse("login")


def test_login_form_leads_to_the_overview(client, operator):
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="password"' in page.content
    response = client.post(
        reverse("login"), {"username": "operator", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("pages:overview")
    assert client.get(reverse("pages:overview")).status_code == 200


def test_wrong_password_is_refused(client, operator):
    response = client.post(reverse("login"), {"username": "operator", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content
    assert client.get(reverse("pages:overview")).status_code == 302


def test_overview_counts_busy_idle_erroring_stale_and_power(operator_client, small_fleet):
    response = operator_client.get(reverse("pages:overview"))
    assert response.status_code == 200
    by_name = {s.name: s for s in response.context["summaries"]}
    alpha, beta = by_name["alpha"], by_name["beta"]
    assert (alpha.gpus, alpha.busy, alpha.idle, alpha.erroring, alpha.stale) == (16, 4, 2, 2, 8)
    assert (beta.gpus, beta.busy, beta.idle, beta.erroring, beta.stale) == (4, 4, 0, 0, 0)
    # Power now: newest samples of fresh GPUs only (the stale node contributes nothing).
    assert alpha.power_kw == pytest.approx(3.72)
    assert beta.power_kw == pytest.approx(2.8)
    html = response.content.decode()
    assert "Fleet overview" in html
    assert "vendor/plotly-4.1.1.min.js" in html and "cdn" not in html.lower()
    assert reverse("telemetry_api:overview_csv") in html
    assert 'id="overview-data"' in html  # first draw needs no extra request


def test_overview_json_has_one_cell_per_gpu_with_the_latest_values(operator_client, small_fleet):
    data = operator_client.get(reverse("pages_api:overview_json")).json()
    assert "gpus" not in data  # the page does not read the per-GPU list
    assert data["node_url"] == reverse("pages:node", args=[0])

    alpha = next(c for c in data["clusters"] if c["name"] == "alpha")
    grid = alpha["grid"]
    assert grid["level"] == "gpu" and grid["width"] == 8
    assert grid["hosts"] == ["gpu-a-01", "gpu-a-02"]
    assert grid["node_ids"] == [small_fleet.a01.id, small_fleet.a02.id]
    # One slot per GPU: node gpu-a-01's GPUs 0-7, then gpu-a-02's (stale: grey, no values).
    assert sorted(grid["status"][:8]) == sorted("bbbbiiee")
    assert grid["status"][2:4] == "ee" and grid["status"][5] == "i"
    assert grid["status"][8:] == "s" * 8 and grid["util"][8:] == [None] * 8
    assert grid["util"][0] == 95 and grid["power"][0] == 650  # newest, not the older 1 %
    assert sum(v is not None for v in grid["util"]) + grid["status"].count("s") == 16


def test_overview_json_lists_every_gpu_for_scripts_when_asked(operator_client, small_fleet):
    data = operator_client.get(reverse("pages_api:overview_json"), {"gpus": "1"}).json()
    assert len(data["gpus"]) == 20
    cell = next(g for g in data["gpus"] if g["node"] == "gpu-a-01" and g["index"] == 0)
    assert cell["gpu_util"] == 95.0 and cell["power_w"] == 650.0
    assert cell["status"] == "busy" and cell["model"] == MODEL
    assert cell["node_url"] == reverse("pages:node", args=[small_fleet.a01.id])


def test_overview_of_a_large_cluster_has_one_cell_per_node(small_fleet):
    """Above GPU_CELLS_MAX GPUs a cluster's cells are nodes: mean util and GPUs per status."""
    from django.utils import timezone

    from webapp.pages.overview import overview_payload
    from webapp.telemetry.selectors import clusters_overview

    summaries, gpus = clusters_overview()
    data = overview_payload(
        summaries,
        gpus,
        holders={},
        now=timezone.now(),
        node_url=lambda i: f"/nodes/{i}/",
        busy_util_pct=50,
        stale_after_s=60,
        gpu_cells_max=4,
    )
    alpha = next(c for c in data["clusters"] if c["name"] == "alpha")
    grid = alpha["grid"]
    assert grid["level"] == "node" and grid["hosts"] == ["gpu-a-01", "gpu-a-02"]
    busy, idle, erroring, stale = grid["counts"][0]
    assert (busy, idle, erroring, stale) == (4, 2, 2, 0)
    assert grid["counts"][1] == [0, 0, 0, 8] and grid["util"][1] is None
    assert grid["util"][0] is not None


def test_overview_json_is_gzipped_for_a_browser_that_accepts_it(operator_client, small_fleet):
    plain = operator_client.get(reverse("pages_api:overview_json"))
    zipped = operator_client.get(reverse("pages_api:overview_json"), HTTP_ACCEPT_ENCODING="gzip")
    assert zipped["Content-Encoding"] == "gzip"
    assert len(zipped.content) < len(plain.content)
    page = operator_client.get(reverse("pages:overview"), HTTP_ACCEPT_ENCODING="gzip")
    assert page["Content-Encoding"] == "gzip"


def test_overview_query_count_does_not_grow_with_the_fleet(
    operator_client, small_fleet, django_assert_max_num_queries
):
    for n in range(3, 8):
        seed_node("beta", f"gpu-b-0{n}", utils=[40] * 8)
    # session, user, clusters, latest samples of every GPU (with its node's state), the GPUs
    # jobs hold now.
    with django_assert_max_num_queries(5):
        assert operator_client.get(reverse("pages:overview")).status_code == 200
    with django_assert_max_num_queries(5):
        assert operator_client.get(reverse("pages_api:overview_json")).status_code == 200


def test_overview_csv_has_one_row_per_cluster(operator_client, small_fleet):
    rows = _csv(operator_client.get(reverse("telemetry_api:overview_csv")))
    assert [r["cluster"] for r in rows] == ["alpha", "beta"]
    assert rows[0] == {
        "cluster": "alpha",
        "nodes": "2",
        "gpus": "16",
        "busy": "4",
        "idle": "2",
        "erroring": "2",
        "stale": "8",
        "power_kw": "3.72",
    }


def test_empty_fleet_overview_explains_what_to_do(operator_client, db):
    response = operator_client.get(reverse("pages:overview"))
    assert response.status_code == 200
    assert b"No clusters yet" in response.content
    assert operator_client.get(reverse("pages_api:overview_json")).json()["clusters"] == []


def _traces_with_points(figure: dict) -> list[dict]:
    return [t for t in figure["data"] if any(v is not None for v in t.get("y", []))]


def test_node_page_shows_each_gpu_and_its_last_hour(operator_client, small_fleet):
    response = operator_client.get(reverse("pages:node", args=[small_fleet.a01.id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Node gpu-a-01" in html and "GPU-alpha-gpu-a-01-07" in html
    assert response.context["time_range"].key == "1h"
    figure = response.context["figures"]["series"]
    # 5 metrics x 8 GPUs, every one with the 3 raw samples of the batch.
    assert len(figure["data"]) == 40
    assert len(_traces_with_points(figure)) == 40
    assert all(len(t["x"]) == 3 for t in figure["data"])
    assert {t["name"] for t in figure["data"]} == {f"GPU {i}" for i in range(8)}


def test_node_page_says_which_job_holds_each_gpu_and_what_happened(operator_client, small_fleet):
    history = node_history(small_fleet)
    response = operator_client.get(reverse("pages:node", args=[small_fleet.a01.id]))
    assert response.status_code == 200
    holders = {g.index: job for g, _, job in response.context["gpus"]}
    assert [holders[i].scheduler_id for i in range(4)] == ["77"] * 4
    assert all(holders[i] is None for i in range(4, 8))
    html = response.content.decode()
    assert html.count(f'href="{reverse("jobs:detail", args=[history["current"].id])}"') == 4
    # Recent GPU errors, failures and recovery actions, in words, with links.
    assert "Xid 79" in html and "fallen off the bus" in html.lower()
    assert reverse("failures:detail", args=[history["failure"].pk]) in html
    assert "Drain node" in html and "Succeeded" in html and "node drained" in html
    # The other node has none of it.
    other = operator_client.get(reverse("pages:node", args=[small_fleet.a02.id]))
    text = other.content.decode()
    assert "No GPU error." in text and "No failure." in text and "No recovery action." in text


def test_node_page_day_range_reads_only_the_rollup(operator_client, db):
    # Three hours ago: outside the last hour, inside the last day.
    node = seed_node("alpha", "gpu-a-09", utils=[70] * 2, t0=time.time() - 3 * 3600, intervals=6)
    url = reverse("pages:node", args=[node.id])

    hour = operator_client.get(url).context["figures"]["series"]
    assert _traces_with_points(hour) == []
    # Without raw samples the day view still draws: it reads telemetry_gpurollup1m only.
    with connection.cursor() as cur:
        cur.execute("DELETE FROM telemetry_gpusample")
    response = operator_client.get(url + "?range=1d")
    assert response.context["time_range"].key == "1d"
    assert b"1-minute rollup" in response.content
    day = response.context["figures"]["series"]
    util = [t for t in day["data"] if t["yaxis"] == "y"]
    assert len(util) == 2 and all(t["y"] for t in util)
    # 6 samples of 10 s land in one or two minutes; the rollup mean is (5 x 1 + 70) / 6.
    assert sum(len(t["y"]) for t in util) <= 4


def test_node_csv_lists_the_gpus_with_latest_values(operator_client, small_fleet):
    rows = _csv(operator_client.get(reverse("telemetry_api:node_csv", args=[small_fleet.a01.id])))
    assert [int(r["index"]) for r in rows] == list(range(8))
    assert rows[0]["gpu_util_pct"] == "95.0" and rows[0]["power_w"] == "650.0"
    assert rows[2]["status"] == "erroring"
    assert rows[0]["mem_used_gib"] == "40.0"


def test_unknown_node_and_gpu_are_404(operator_client, db):
    assert operator_client.get(reverse("pages:node", args=[999999])).status_code == 404
    assert operator_client.get(reverse("telemetry:gpu", args=[999999])).status_code == 404


def _latest(response) -> dict[str, str]:
    return {r.field: r.text for _, rows in response.context["latest"] for r in rows}


def test_gpu_page_names_and_decodes_every_latest_value(operator_client, small_fleet):
    """No raw field value reaches a person: a state reads P0, a link Gen 4 x16, the clock
    event mask its reasons, the energy counter in kWh under its name; no scroll box."""
    gpu = small_fleet.gpu(small_fleet.a01, 0)
    response = operator_client.get(reverse("telemetry:gpu", args=[gpu.id]))
    latest = _latest(response)
    assert set(latest) == set(GPU_FIELD_NAMES)  # every field, once
    values = gpu_sample_latest(gpu.id)[1]
    if values.get("pstate") is not None:
        assert latest["pstate"] == f"P{int(values['pstate'])}"
    if values.get("pcie_gen") is not None:
        assert latest["pcie_gen"] == f"Gen {int(values['pcie_gen'])}"
        assert latest["pcie_width"] == f"x{int(values['pcie_width'])}"
    assert not re.search(r"\b0x[0-9a-f]+\b", latest["clocks_event_reasons"])
    html = response.content.decode()
    assert "Energy since driver load" in html and "latest-wrap" not in html
    assert " P<" not in html and " gen<" not in html


def test_gpu_page_shows_identity_latest_values_and_unsupported_metrics(
    operator_client, small_fleet
):
    gpu = small_fleet.gpu(small_fleet.a01, 2)
    response = operator_client.get(reverse("telemetry:gpu", args=[gpu.id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert gpu.uuid in html and MODEL in html
    assert response.context["status"] == "erroring"
    assert "1 double-bit ECC error since the last reset" in html
    latest = _latest(response)
    assert latest["gpu_util"] == "85.0 %"
    assert latest["power_w"] == "630.0 W"
    assert latest["fb_used_bytes"] == "40.0 GiB"
    assert latest["ecc_dbe_vol"] == "1"
    # NULL means the GPU does not support it: never shown as 0.
    assert latest["tensor_active"] == f"n/a (not supported on {MODEL})"
    assert latest["nvlink_replay"] == f"n/a (not supported on {MODEL})"
    assert len(_traces_with_points(response.context["figures"]["series"])) == 5


def test_stale_gpu_page_says_so_and_shows_the_last_values(operator_client, small_fleet):
    gpu = small_fleet.gpu(small_fleet.a02, 0)
    response = operator_client.get(reverse("telemetry:gpu", args=[gpu.id]))
    assert response.context["status"] == "stale"
    assert b"No sample from this GPU in the last 120 seconds" in response.content
    assert _latest(response)["gpu_util"] == "50.0 %"


def test_gpu_csv_exports_the_series_of_the_range(operator_client, small_fleet):
    gpu = small_fleet.gpu(small_fleet.a01, 0)
    rows = _csv(operator_client.get(reverse("telemetry_api:gpu_csv", args=[gpu.id]) + "?range=1h"))
    assert len(rows) == 3
    assert list(rows[0]) == [
        "ts_utc",
        "gpu_util",
        "sm_active",
        "fb_used_bytes",
        "power_w",
        "gpu_temp_c",
    ]
    assert [r["gpu_util"] for r in rows] == ["1.0", "1.0", "95.0"]


def test_nodes_table_shows_state_last_seen_gpus_and_busy(operator_client, small_fleet):
    response = operator_client.get(reverse("telemetry:nodes", args=["alpha"]))
    assert response.status_code == 200
    rows = {n.hostname: n for n in response.context["nodes"]}
    assert list(rows) == ["gpu-a-01", "gpu-a-02"]
    assert (rows["gpu-a-01"].gpus, rows["gpu-a-01"].busy) == (8, 4)
    assert (rows["gpu-a-02"].gpus, rows["gpu-a-02"].busy) == (8, 0)  # stale: not busy
    assert rows["gpu-a-01"].state == "up" and rows["gpu-a-01"].last_seen is not None
    # Silent for 15 minutes: shown stale even before the periodic task marks it so.
    assert rows["gpu-a-02"].state == "stale"
    assert "Stale (not reporting)" in response.content.decode()
    html = response.content.decode()
    assert reverse("pages:node", args=[small_fleet.a01.id]) in html
    assert reverse("telemetry_api:nodes_csv", args=["alpha"]) in html
    assert "gpu-b-01" not in html  # another cluster's node


def test_nodes_csv(operator_client, small_fleet):
    seed_node("alpha", "gpu-a-03", utils=[0, 100])
    response = operator_client.get(reverse("telemetry_api:nodes_csv", args=["alpha"]))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["hostname"] for r in rows] == ["gpu-a-01", "gpu-a-02", "gpu-a-03"]
    assert rows[0]["state"] == "up" and rows[0]["gpus"] == "8" and rows[0]["busy_gpus"] == "4"
    assert rows[2]["gpus"] == "2" and rows[2]["busy_gpus"] == "1"
    assert rows[0]["last_seen_utc"].startswith("20")
    assert rows[1]["state"] == "stale"


def test_unknown_cluster_is_404(operator_client, db):
    assert operator_client.get(reverse("telemetry:nodes", args=["nope"])).status_code == 404


def test_gpu_first_seen_is_its_earliest_sample_when_history_arrived_late(operator_client, db):
    """A GPU whose history arrived after it registered (an agent's spool replayed, a
    backfill): the page's first seen is no later than the first point of its own chart."""
    node = seed_node("late", "gpu-late-01", utils=[40], t0=time.time() - 3 * 3600)
    gpu = Gpu.objects.get(node=node, index=0)
    with connection.cursor() as cur:
        cur.execute("SELECT min(ts) FROM telemetry_gpusample WHERE gpu_id = %s", [gpu.id])
        earliest = cur.fetchone()[0]
    assert earliest < gpu.first_seen - timedelta(hours=2)  # registered now, samples 3 h old
    response = operator_client.get(reverse("telemetry:gpu", args=[gpu.id]) + "?range=6h")
    found = re.search(r"<th>First seen</th><td[^>]*>(.*?)</td>", response.content.decode(), re.S)
    shown = re.sub(r"<[^>]+>", "", found.group(1))
    assert shown.startswith(f"{earliest:%Y-%m-%d %H:%M} UTC"), shown
    assert f"registered {gpu.first_seen:%Y-%m-%d %H:%M}" in shown
