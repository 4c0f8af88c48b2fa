"""/metrics: the fleet in Prometheus text format, behind its own key."""

from __future__ import annotations

import gzip
import json
import time

from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from collectors.backends.base import GPU_POS
from collectors.schema import BatchError
from tests.failures.conftest import CLUSTER, make_fleet, xid_event
from tests.helpers import make_batch
from webapp.core.metrics import TextFamily, labels_text
from webapp.core.refusals import AuthError, batch_reject
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Gpu
from webapp.fleet.services import node_token_issue
from webapp.telemetry.services import samples_ingest

KEY = "scrape-key-123"
H100 = "NVIDIA H100 80GB HBM3"


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


def _scrape(client) -> dict[str, dict[tuple, float]]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {KEY}")
    assert response.status_code == 200, response.content
    return _families(response.content.decode())


def _key(**labels: str) -> tuple:
    return tuple(sorted(labels.items()))


def _gpu(index: int, node: str = "gpu-node-01") -> tuple:
    return _key(
        cluster=CLUSTER, node=node, gpu=str(index), uuid=f"GPU-{node}-{index:02d}", model=H100
    )


def test_metrics_show_each_gpu_its_cluster_failures_and_refusals(client, db, settings):
    """A small cluster with known samples, a failed pretraining job, an Xid 79 and refused
    batches: every family a Prometheus user reads, in base units."""
    settings.VIGIL_METRICS_KEY = KEY
    fleet = make_fleet()
    t0 = float(int(time.time())) - 60
    batch = make_batch(CLUSTER, "gpu-node-01", fleet.tokens["gpu-node-01"], t0=t0, gpus=2)
    hot = batch["samples"][1]  # GPU 1: hot, throttled, its own energy counter
    hot[GPU_POS["gpu_util"]] = 100.0
    hot[GPU_POS["sm_active"]] = 0.9
    hot[GPU_POS["power_w"]] = 650.5
    hot[GPU_POS["gpu_temp_c"]] = 91.0
    hot[GPU_POS["clocks_event_reasons"]] = 0x40  # HwThermalSlowdown
    hot[GPU_POS["energy_mj"]] = 123_456_789
    batch["samples"][0][GPU_POS["clocks_event_reasons"]] = 0x4  # SwPowerCap: not thermal
    samples_ingest(json.dumps(batch))
    end = t0 - 600
    fleet.run_job("900", end - 3600, end, state="NODE_FAIL", job_type="pretrain")
    failure_diagnose(FailureEvent.objects.get(kind="job_failure").pk)
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[xid_event(t0, 79)]))
    batch_reject(
        json.dumps(make_batch(CLUSTER, "gpu-node-01", "x" * 40)), AuthError("bad_token", "wrong")
    )
    batch_reject("{}", BatchError("invalid", "not a batch"))
    batch_reject("{}", BatchError("invalid", "not a batch"))

    m = _scrape(client)

    assert m["vigil_gpu_utilization_ratio"] == {_gpu(0): 0.5, _gpu(1): 1.0}
    assert m["vigil_gpu_sm_active_ratio"][_gpu(0)] == 0.4
    assert m["vigil_gpu_sm_active_ratio"][_gpu(1)] == 0.9
    assert m["vigil_gpu_power_watts"] == {_gpu(0): 300.0, _gpu(1): 650.5}
    assert m["vigil_gpu_temperature_celsius"] == {_gpu(0): 55.0, _gpu(1): 91.0}
    assert m["vigil_gpu_memory_used_bytes"][_gpu(0)] == 40 * 2**30
    assert m["vigil_gpu_thermal_throttling"] == {_gpu(0): 0.0, _gpu(1): 1.0}
    assert m["vigil_gpu_energy_joules_total"][_gpu(1)] == 123_456.789  # mJ -> J
    # The 16 GPUs of the fleet without a sample are stale: counted, with no per-GPU series.
    cluster = (("cluster", CLUSTER),)
    assert m["vigil_gpus"][cluster + (("status", "busy"),)] == 2
    assert m["vigil_gpus"][cluster + (("status", "stale"),)] == 14
    assert m["vigil_cluster_gpus_up"] == {cluster: 2}
    assert m["vigil_cluster_gpu_utilization_mean_ratio"] == {cluster: 0.75}
    assert m["vigil_cluster_gpu_power_watts"] == {cluster: 950.5}

    node = (("cluster", CLUSTER), ("node", "gpu-node-01"))
    assert m["vigil_node_last_seen_timestamp_seconds"] == {node: t0}
    assert m["vigil_ingest_lag_seconds"][cluster] >= 60  # now - the newest stored sample
    assert m["vigil_ingest_samples_total"] == {(): 2}
    assert m["vigil_ingest_rejected_batches_total"] == {
        (("reason", "bad_token"),): 1,
        (("reason", "invalid"),): 2,
    }

    failed_pretraining = _key(
        cluster=CLUSTER,
        kind="job_failure",
        cause="node_lost",
        category="infrastructure",
        job_type="pretrain",
    )
    assert m["vigil_failures_total"] == {failed_pretraining: 1}  # the pending Xid one: not yet
    diagnosed = FailureEvent.objects.get(kind="job_failure").diagnosed_at.timestamp()
    assert m["vigil_failures_last_diagnosed_timestamp_seconds"] == {failed_pretraining: diagnosed}
    xid79 = _key(cluster=CLUSTER, node="gpu-node-02", kind="xid", xid="79", page="true")
    assert m["vigil_gpu_errors_total"] == {xid79: 1}
    assert m["vigil_gpu_errors_last_timestamp_seconds"] == {xid79: t0}


def test_a_redelivered_batch_adds_no_samples_to_the_count(client, node_token, settings):
    settings.VIGIL_METRICS_KEY = KEY
    cluster, node, token = node_token
    text = json.dumps(make_batch(cluster, node, token, gpus=4, intervals=3))
    samples_ingest(text)
    samples_ingest(text)
    assert _scrape(client)["vigil_ingest_samples_total"] == {(): 12}


def test_metrics_read_a_fleet_with_a_fixed_number_of_queries(client, db, settings):
    """No query per GPU or per node: a fleet four times larger costs the same queries."""
    settings.VIGIL_METRICS_KEY = KEY

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            _scrape(client)
        return len(ctx.captured_queries)

    fleet = make_fleet()
    samples_ingest(json.dumps(make_batch(CLUSTER, "gpu-node-01", fleet.tokens["gpu-node-01"])))
    small = queries()
    for host in ("gpu-node-02", "gpu-node-03", "gpu-node-04"):
        token = node_token_issue(CLUSTER, host)
        samples_ingest(json.dumps(make_batch(CLUSTER, host, token)))
    assert queries() == small


def test_text_families_escape_what_prometheus_would_misread():
    """Label values a site does not control (a GPU's model name) stay one value each."""
    family = TextFamily("vigil_test_bytes", "help with a \\ backslash\nand a newline", "counter")
    family.add(labels_text(["model", "node"], ['H100 "SXM" \\ 80GB\n', "n1"]), 42949672960)
    family.add(labels_text(["model", "node"], ["plain", "n2"]), float("nan"))
    [parsed] = text_string_to_metric_families(family.text())
    assert parsed.type == "counter"
    assert [(s.labels, s.value) for s in parsed.samples][0] == (
        {"model": 'H100 "SXM" \\ 80GB\n', "node": "n1"},
        42949672960.0,
    )
    assert parsed.samples[1].value != parsed.samples[1].value  # NaN


def test_a_scrape_that_accepts_gzip_gets_the_same_families_compressed(client, db, settings):
    """Prometheus asks for gzip: the body is compressed, and reads as the plain one does, with
    a GPU model name a site does not control kept one label value."""
    settings.VIGIL_METRICS_KEY = KEY
    fleet = make_fleet()
    t0 = float(int(time.time())) - 60
    batch = make_batch(CLUSTER, "gpu-node-01", fleet.tokens["gpu-node-01"], t0=t0, gpus=2)
    samples_ingest(json.dumps(batch))
    odd = 'H100 "SXM" \\ 80GB'
    Gpu.objects.filter(node__hostname="gpu-node-01", index=1).update(model=odd)

    plain = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {KEY}")
    packed = client.get(
        "/metrics", HTTP_AUTHORIZATION=f"Bearer {KEY}", HTTP_ACCEPT_ENCODING="gzip, deflate"
    )

    assert not plain.has_header("Content-Encoding")
    assert packed["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed["Vary"]
    unpacked = _families(gzip.decompress(packed.content).decode())
    lag = "vigil_ingest_lag_seconds"  # now - the newest sample: moves between the two scrapes
    assert {k: v for k, v in unpacked.items() if k != lag} == {
        k: v for k, v in _families(plain.content.decode()).items() if k != lag
    }
    odd_gpu = _key(
        cluster=CLUSTER, node="gpu-node-01", gpu="1", uuid="GPU-gpu-node-01-01", model=odd
    )
    assert unpacked["vigil_gpu_power_watts"] == {_gpu(0): 300.0, odd_gpu: 300.0}
