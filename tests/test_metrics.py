"""/metrics: the fleet in Prometheus text format, behind its own key."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import make_batch
from webapp.core.refusals import AuthError, batch_reject
from webapp.telemetry.services import samples_ingest


def _families(text: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_metrics_show_gpus_power_and_rejections(client, node_token, settings):
    settings.VIGIL_METRICS_KEY = "scrape-key-123"
    cluster, node, token = node_token
    samples_ingest(json.dumps(make_batch(cluster, node, token, gpus=4)))
    bad = json.dumps(make_batch(cluster, node, "x" * 40))
    batch_reject(bad, AuthError("bad_token", "wrong token"))

    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-key-123")

    assert response.status_code == 200
    metrics = _families(response.content.decode())
    assert metrics["vigil_gpus"][(("cluster", cluster), ("status", "busy"))] == 4
    assert metrics["vigil_cluster_gpu_power_watts"][(("cluster", cluster),)] == 4 * 300.0
    assert metrics["vigil_nodes"][(("cluster", cluster), ("state", "up"))] == 1
    assert metrics["vigil_ingest_rejected_batches_total"][(("reason", "bad_token"),)] == 1
    assert metrics["vigil_rollup_pending_batches"][()] == 1


def test_metrics_refuse_a_missing_or_wrong_key(client, db, settings):
    settings.VIGIL_METRICS_KEY = "scrape-key-123"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401


def test_metrics_closed_in_production_without_a_key(client, db, settings):
    settings.VIGIL_METRICS_KEY = ""
    settings.DEBUG = False
    response = client.get("/metrics")
    assert response.status_code == 403
    assert "VIGIL_METRICS_KEY" in response.json()["error"]


def test_metrics_never_read_a_key_from_the_query_string(client, db, settings):
    settings.VIGIL_METRICS_KEY = "scrape-key-123"
    assert client.get("/metrics?key=scrape-key-123").status_code == 401


def test_refused_scrapes_are_counted(client, db, settings):
    settings.VIGIL_METRICS_KEY = "scrape-key-123"
    client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-key-123")
    assert _families(response.content.decode())["vigil_api_unauthenticated_requests_total"] == {
        (): 1.0
    }
