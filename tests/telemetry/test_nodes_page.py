"""Nodes table of a cluster, and its CSV export."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from tests.telemetry.conftest import SmallFleet, seed_node, seed_small_fleet


@pytest.fixture
def small_fleet(db) -> SmallFleet:
    return seed_small_fleet()


def test_anonymous_visitor_is_sent_to_login(client, small_fleet):
    for url in (
        reverse("telemetry:nodes", args=["alpha"]),
        reverse("telemetry_api:nodes_csv", args=["alpha"]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


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
    assert reverse("telemetry:node", args=[small_fleet.a01.id]) in html
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
