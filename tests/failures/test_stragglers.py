"""Stragglers: the rule over plain data, and a straggling GPU of a running job found from real
telemetry (ingested, rolled up, read through webapp.telemetry.selectors)."""

from __future__ import annotations

import json
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

import pytest

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from webapp.failures.models import FailureEvent
from webapp.failures.stragglers import stragglers_detect, stragglers_find
from webapp.telemetry.services import rollups_refresh, samples_ingest


def _now() -> float:
    return float(int(time.time()))


def test_straggler_rule_over_plain_data():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [t0 + timedelta(minutes=k) for k in range(3)]

    def series(slow: list[float]) -> dict:
        return {
            g: {m: {"sm_active": (slow[k] if g == 2 else 0.8)} for k, m in enumerate(minutes)}
            for g in range(4)
        }

    found = stragglers_find(series([0.3, 0.3, 0.3]), minutes)
    assert set(found) == {2} and found[2]["sm_active"][0] == (0.3, 0.8)
    assert stragglers_find(series([0.3, 0.79, 0.3]), minutes) == {}  # recovered one minute


@pytest.mark.django_db
def test_straggling_gpu_of_a_running_job_is_a_performance_event(fleet, operator_client):
    now = _now()
    t0 = (now // 60) * 60 - 15 * 60
    fleet.run_job("800", t0 - 60, None, nodes=("gpu-node-01",))
    batch = make_batch(
        "testcluster",
        "gpu-node-01",
        fleet.tokens["gpu-node-01"],
        t0=t0,
        intervals=15 * 4,
        step_s=15,
        uuid_prefix="GPU-gpu-node-01",
    )
    sm = 2 + GPU_FIELD_NAMES.index("sm_active")  # wire row: index, ts, then the fields
    for row in batch["samples"]:
        row[sm] = 0.2 if row[0] == 5 else 0.7
    samples_ingest(json.dumps(batch))
    rollups_refresh()
    assert stragglers_detect() == 1
    assert stragglers_detect() == 0  # once per job run and GPU
    event = FailureEvent.objects.get(kind="performance")
    assert (event.job.scheduler_id, event.gpu.index, event.blamed_node.hostname) == (
        "800",
        5,
        "gpu-node-01",
    )
    assert "sm_active" in event.detail
    assert event.evidence[0]["text"].endswith("vs job median 0.7")
    page = operator_client.get(f"/failures/{event.pk}/").content.decode()
    assert "straggler" in page and "vs job median 0.7" in page
    timeline = operator_client.get("/failures/").context["figures"]["timeline"]
    assert [t["name"] for t in timeline["data"]] == ["performance"]
    # Not a failure: reliability does not count it.
    assert operator_client.get("/failures/reliability/").context["r"].failures == 0


def _stragglers_by_definition(series: dict, minutes: list, ratio: float = 0.8) -> dict:
    """The rule as written: every GPU against the median of all the others, minute by minute
    (quadratic; the reference the one-pass version must equal)."""
    out: dict = {}
    for metric in ("sm_active", "power_w", "sm_clock_mhz"):
        for gpu in series:
            trail = []
            for minute in minutes:
                mine = series[gpu].get(minute, {}).get(metric)
                others = [
                    v
                    for g, per in series.items()
                    if g != gpu and (v := per.get(minute, {}).get(metric)) is not None
                ]
                if mine is None or not others or statistics.median(others) <= 0:
                    break
                if mine >= ratio * statistics.median(others):
                    break
                trail.append((mine, statistics.median(others)))
            else:
                if trail:
                    out.setdefault(gpu, {})[metric] = trail
    return out


@pytest.mark.parametrize("gpus", [2, 3, 8, 33])
def test_one_pass_finds_exactly_the_stragglers_of_the_rule(gpus):
    rng = random.Random(gpus)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [t0 + timedelta(minutes=k) for k in range(4)]
    for _ in range(50):
        # Peers near 0.7, some GPUs slow, ties, gaps (no value) and a dead (0) minute.
        series = {
            g: {
                m: {
                    "sm_active": rng.choice([None, 0.0, 0.2, 0.5, 0.7, 0.7, 0.72, 0.69]),
                    "power_w": rng.choice([300.0, 650.0, 700.0]),
                }
                for m in minutes
                if rng.random() > 0.05
            }
            for g in range(gpus)
        }
        assert stragglers_find(series, minutes) == _stragglers_by_definition(series, minutes)
