"""Reliability page: failure rate, MTBF, Table 3 shape, offenders, ETTR, Young/Daly."""

from __future__ import annotations

import csv
import io
import math
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.failures.conftest import nccl_window, xid_event
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.selectors import young_daly_s
from webapp.failures.services import failure_diagnose
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db
H = 3600.0


def _rows(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.fixture
def history(fleet):
    """30 days, 2 nodes: a 16-GPU pretraining job killed by an Xid 79 (30 min after its last
    checkpoint), an 8-GPU script error, a time limit (not a failure) and a running
    pretraining job that checkpoints every 30 min."""
    now = float(int(time.time()))
    for host in ("gpu-node-01", "gpu-node-02"):  # both watched all the 30 days and more
        _observe(host, datetime.fromtimestamp(now - 31 * 24 * H, UTC), datetime.now(UTC))
    end = now - 2 * H
    fleet.run_job("A", end - 6 * H, None, last_checkpoint_ts=end - 0.5 * H)
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(end - 600, 79, index=3)])
    )
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[nccl_window("A", end - 30)]))
    fleet.run_job("A", end - 6 * H, end)
    fleet.run_job("B", now - 5 * H, None, nodes=("gpu-node-02",), job_type="debug")
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-02",
            log_windows=[
                {
                    "job_id": "B",
                    "ts": now - 4 * H - 5,
                    "path": "/l/B",
                    "first_line_no": 1,
                    "lines": [
                        "Traceback (most recent call last):",
                        '  File "/home/alice/t.py", line 1, in <module>',
                        "TypeError: unsupported operand",
                    ],
                }
            ],
        )
    )
    fleet.run_job("B", now - 5 * H, now - 4 * H, nodes=("gpu-node-02",), job_type="debug")
    fleet.run_job("C", now - 3 * H, now - 2.5 * H, state="TIMEOUT", nodes=("gpu-node-01",))
    fleet.run_job("R", now - 2 * H, None, nodes=("gpu-node-01", "gpu-node-02"))
    running = Job.objects.get(scheduler_id="R")
    for k in range(3):
        running.last_checkpoint_at = datetime.fromtimestamp(now - 1.5 * H + k * 1800, UTC)
        running.save()
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)
    return now


def test_young_daly_matches_the_worked_example():
    # failure-signatures.md s9: delta 60 s, M 3 h -> about 1,140 s.
    assert young_daly_s(60, 3 * H) == pytest.approx(1138.4, abs=1)


def test_reliability_numbers(operator_client, history):
    response = operator_client.get("/failures/reliability/?days=30")
    assert response.status_code == 200
    r = response.context["r"]
    # A and B count; C (time limit) does not; the Xid 79 that killed A is the same incident.
    assert r.failures == 2
    assert r.node_days == pytest.approx(60, rel=1e-3)
    assert r.rate_per_1000_node_days == pytest.approx(1000 * 2 / 60, rel=1e-3)
    assert r.mtbf_h == pytest.approx(30 * 24 / 2, rel=1e-3)
    assert {x.node: x.failures for x in r.per_node} == {"gpu-node-02": 1}
    sizes = {x.size: x for x in r.per_size}
    assert sizes["9-64 GPUs"].failures == 1 and sizes["2-8 GPUs"].failures == 1
    assert r.times["diagnose_median_s"] is not None

    table3 = {c.category: c for c in r.table3}
    assert set(table3) == {"infrastructure", "script"}
    assert table3["infrastructure"].jobs == 1
    assert table3["infrastructure"].gpu_hours == pytest.approx(8.0)  # 16 GPUs x 0.5 h
    assert table3["script"].gpu_hours == pytest.approx(8.0)  # 8 GPUs x 1 h, no checkpoint
    assert table3["infrastructure"].gpu_share == pytest.approx(0.5)
    assert table3["infrastructure"].causes[0].cause == "gpu_off_bus"

    ettr = {x.job.scheduler_id: x for x in r.ettr}
    assert ettr["A"].ettr == pytest.approx(5.5 / 6, rel=1e-3)

    ckpt = {x.job.scheduler_id: x for x in r.checkpoints}
    assert set(ckpt) == {"R"}
    assert ckpt["R"].nodes == 2
    assert ckpt["R"].used_s == pytest.approx(1800)
    mtbf_s = 86400 / (2 * r.rate_per_1000_node_days / 1000)
    assert ckpt["R"].optimal_s == pytest.approx(math.sqrt(2 * 60 * mtbf_s), rel=1e-3)


def test_checkpoint_write_time_is_configurable(operator_client, history, settings):
    settings.VIGIL_CHECKPOINT_WRITE_S = 5
    r = operator_client.get("/failures/reliability/").context["r"]
    assert r.checkpoint_write_s == 5
    r2 = operator_client.get("/failures/reliability/?ckpt_write_s=20").context["r"]
    assert r2.checkpoints[0].optimal_s == pytest.approx(r.checkpoints[0].optimal_s * 2, rel=1e-3)
    bad = operator_client.get("/failures/reliability/?ckpt_write_s=-1")
    assert bad.status_code == 400
    assert "ckpt_write_s" in bad.content.decode()


def test_used_interval_is_unknown_without_two_checkpoints(operator_client, fleet):
    now = float(int(time.time()))
    fleet.run_job("S", now - H, None, last_checkpoint_ts=now - 600)
    r = operator_client.get("/failures/reliability/").context["r"]
    row = r.checkpoints[0]
    assert row.used_s is None and row.optimal_s is None  # no failure yet: no MTBF
    body = operator_client.get("/failures/reliability/").content.decode()
    assert "unknown" in body


def test_repeat_offender(operator_client, fleet):
    now = float(int(time.time()))
    for k, ts in enumerate((now - 20 * H, now - 10 * H)):
        node_events_ingest(
            fleet.node_batch("gpu-node-01", gpu_events=[xid_event(ts, 48, index=k, node_no=1)])
        )
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)
    r = operator_client.get("/failures/reliability/").context["r"]
    assert [(x.node, x.failures, x.xids, x.causes) for x in r.offenders] == [
        ("gpu-node-01", 2, 2, "gpu_ecc")
    ]
    assert r.offenders[0].days_since_last == pytest.approx(10 / 24, abs=0.01)
    rows = _rows(operator_client.get("/api/v1/failures/reliability/offenders.csv"))
    assert rows[0]["node"] == "gpu-node-01" and rows[0]["gpu_errors"] == "2"


@pytest.mark.parametrize(
    "table", ["summary", "nodes", "sizes", "causes", "table3", "offenders", "ettr", "checkpoints"]
)
def test_every_table_exports_csv(operator_client, history, table):
    response = operator_client.get(f"/api/v1/failures/reliability/{table}.csv?days=30")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = _rows(response)
    if table == "summary":
        assert rows[0]["failures"] == "2"
    if table == "table3":
        assert {(r["category"], r["cause"]) for r in rows} == {
            ("infrastructure", "gpu_off_bus"),
            ("script", "user_exception"),
        }
    if table == "checkpoints":
        assert rows[0]["used_interval_s"] == "1800.0"


def test_unknown_table_is_404(operator_client, history):
    assert operator_client.get("/api/v1/failures/reliability/nope.csv").status_code == 404


def test_period_window(operator_client, history):
    old = FailureEvent.objects.get(job__scheduler_id="B")
    old.occurred_at -= timedelta(days=40)
    old.save()
    r = operator_client.get("/failures/reliability/?days=30").context["r"]
    assert r.failures == 1


def _observe(host: str, first: datetime, last: datetime) -> None:
    """The node first reported at `first` (its GPUs registered then) and last at `last`."""
    from webapp.fleet.models import Gpu, Node

    Gpu.objects.filter(node__hostname=host).update(first_seen=first)
    Node.objects.filter(hostname=host).update(last_seen=last, last_contact_at=last, state="up")


def _observed_h_from_db(now: datetime, since: datetime) -> dict[str, float]:
    """Hours each node was watched in service, computed here from the rows themselves."""
    from django.db.models import Min

    from webapp.fleet.models import Node

    out = {}
    for node in Node.objects.annotate(first=Min("gpus__first_seen")):
        lo, hi = max(node.first, since), min(node.last_seen, now)
        hours = max(0.0, (hi - lo).total_seconds() / H)
        if node.state in ("draining", "drained", "down") and node.state_since:
            hours -= max(0.0, (hi - max(node.state_since, lo)).total_seconds() / H)
        out[node.hostname] = hours
    return out


def test_rates_are_per_node_time_observed(operator_client, fleet):
    """Two nodes watched for hours, not the 30 days asked for, one of them drained for part
    of it: node-days, the rate, cluster and node MTBF and the job-size MTBF are per time
    watched, and the page says so."""
    from webapp.fleet.models import Node

    now_ts = float(int(time.time()))
    now = datetime.fromtimestamp(now_ts, UTC)
    _observe("gpu-node-01", now - timedelta(hours=10), now - timedelta(hours=1))
    _observe("gpu-node-02", now - timedelta(hours=4), now)
    Node.objects.filter(hostname="gpu-node-02").update(
        state="drained", state_since=now - timedelta(hours=2)
    )
    # Two 1-GPU job failures an hour each, the second blamed on gpu-node-02's GPU 3.
    fleet.run_job("P", now_ts - 6 * H, now_ts - 5 * H, nodes=("gpu-node-01",), gpus=1)
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(now_ts - 3 * H - 60, 79, index=0)])
    )
    fleet.run_job("Q", now_ts - 4 * H, now_ts - 3 * H, nodes=("gpu-node-02",), gpus=1)
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)

    response = operator_client.get("/failures/reliability/?days=30")
    body = response.content.decode()
    r = response.context["r"]
    observed = _observed_h_from_db(now, now - timedelta(days=30))
    assert observed == pytest.approx({"gpu-node-01": 9.0, "gpu-node-02": 2.0}, abs=0.01)
    node_days = sum(observed.values()) / 24
    assert r.failures == 2
    summary = _rows(operator_client.get("/api/v1/failures/reliability/summary.csv?days=30"))[0]
    assert float(summary["node_days"]) == pytest.approx(node_days, abs=0.01)
    assert float(summary["failures_per_1000_node_days"]) == pytest.approx(
        1000 * 2 / node_days, rel=0.01
    )
    # The cluster was watched while any node was in service: 10 h ago to 1 h ago.
    assert float(summary["mtbf_h"]) == pytest.approx(9.0 / 2, rel=0.01)
    nodes = {
        x["node"]: x
        for x in _rows(operator_client.get("/api/v1/failures/reliability/nodes.csv?days=30"))
    }
    assert float(nodes["gpu-node-02"]["mtbf_h"]) == pytest.approx(2.0, rel=0.01)
    sizes = {
        x["job_size"]: x
        for x in _rows(operator_client.get("/api/v1/failures/reliability/sizes.csv?days=30"))
    }
    assert float(sizes["1 GPU"]["job_hours"]) == pytest.approx(2.0, rel=0.01)
    assert float(sizes["1 GPU"]["mtbf_observed_h"]) == pytest.approx(1.0, rel=0.01)
    assert "per node-day observed" in body
    assert f"{node_days:.2f} node-days observed" in body
