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


def test_a_minute_without_samples_does_not_hide_a_straggler():
    """A collector restart (or a minute not folded yet) leaves a GPU a minute without a value:
    it is judged on the minutes it has, up to a fifth of the window missing."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [t0 + timedelta(minutes=k) for k in range(10)]

    def series(missing: set[int], slow_gpu_missing: set[int] = frozenset()) -> dict:
        return {
            g: {
                m: {"sm_active": 0.3 if g == 2 else 0.8}
                for k, m in enumerate(minutes)
                if k not in missing and not (g == 2 and k in slow_gpu_missing)
            }
            for g in range(4)
        }

    # The newest minute not folded yet for any GPU; a minute lost by the slow GPU alone.
    for case in (series({9}), series(set(), {4}), series({9}, {4})):
        found = stragglers_find(case, minutes)
        assert set(found) == {2}
        trail = found[2]["sm_active"]
        assert len(trail) == 10 and all(v is None or v == 0.3 for v, _ in trail)
    # Three of ten minutes without a value is too little to judge by; no value at all, nothing.
    assert stragglers_find(series({7, 8, 9}), minutes) == {}
    assert stragglers_find(series(set(), set(range(10))), minutes) == {}


def test_a_held_gpu_left_idle_is_not_a_straggler():
    """A spare the job holds and never uses (0% utilization, clocks and power down) does no
    work for its peers to wait on: only the busy GPU running slow is reported."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [t0 + timedelta(minutes=k) for k in range(10)]
    busy = {"gpu_util": 95.0, "sm_active": 0.7, "power_w": 650.0, "sm_clock_mhz": 1980.0}
    slow = {"gpu_util": 95.0, "sm_active": 0.3, "power_w": 650.0, "sm_clock_mhz": 1980.0}
    spare = {"gpu_util": 0.0, "sm_active": 0.0, "power_w": 60.0, "sm_clock_mhz": 210.0}
    kinds = {0: busy, 1: busy, 2: slow, 3: busy, 4: spare, 5: busy}
    series = {g: {m: dict(kind) for m in minutes} for g, kind in kinds.items()}
    found = stragglers_find(series, minutes)
    assert list(found) == [2] and list(found[2]) == ["sm_active"]
    # The spare does not drag the others' median down either: 0.7 is every busy peer's.
    assert found[2]["sm_active"][0] == (0.3, 0.7)
    # A GPU that works in some minutes and idles in others is judged on its busy minutes only
    # when it is slow in every one of them; idle minutes alone never make a straggler.
    series[4] = {m: dict(slow if k % 2 else spare) for k, m in enumerate(minutes)}
    assert set(stragglers_find(series, minutes)) == {2}


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
    pos = {name: 2 + k for k, name in enumerate(GPU_FIELD_NAMES)}  # wire row: index, ts, fields
    for row in batch["samples"]:
        row[pos["sm_active"]] = 0.2 if row[0] == 5 else 0.7
        if row[0] == 6:  # held and left idle: slower than anyone, and not a straggler
            row[pos["gpu_util"]], row[pos["sm_active"]] = 0.0, 0.0
            row[pos["power_w"]], row[pos["sm_clock_mhz"]] = 60.0, 210.0
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
    """The rule as written: every GPU against the median of all the others, minute by minute,
    a GPU-minute under 10% utilization left out (quadratic; the reference the one-pass version
    must equal)."""

    def idle(per: dict, minute) -> bool:
        util = per.get(minute, {}).get("gpu_util")
        return util is not None and util < 10

    def value(per: dict, minute, metric: str) -> float | None:
        return None if idle(per, minute) else per.get(minute, {}).get(metric)

    gaps_allowed = int(0.2 * len(minutes))  # a fifth of the window may have no value
    out: dict = {}
    for metric in ("sm_active", "power_w", "sm_clock_mhz"):
        for gpu in series:
            trail = []
            for minute in minutes:
                if idle(series[gpu], minute):
                    break
                mine = value(series[gpu], minute, metric)
                if mine is None:  # a gap: no sample this minute
                    trail.append((None, None))
                    continue
                others = [
                    v
                    for g, per in series.items()
                    if g != gpu and (v := value(per, minute, metric)) is not None
                ]
                if not others or statistics.median(others) <= 0:
                    break
                if mine >= ratio * statistics.median(others):
                    break
                trail.append((mine, statistics.median(others)))
            else:
                gaps = sum(v is None for v, _ in trail)
                if gaps <= gaps_allowed and gaps < len(trail):
                    out.setdefault(gpu, {})[metric] = trail
    return out


@pytest.mark.parametrize("n_minutes", [4, 10])
@pytest.mark.parametrize("gpus", [2, 3, 8, 33])
def test_one_pass_finds_exactly_the_stragglers_of_the_rule(gpus, n_minutes):
    rng = random.Random(gpus * 100 + n_minutes)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [t0 + timedelta(minutes=k) for k in range(n_minutes)]
    for _ in range(50):
        # Peers near 0.7, some GPUs slow, ties, gaps (no value), a dead (0) minute, and
        # idle minutes (utilization under 10%).
        series = {
            g: {
                m: {
                    "sm_active": rng.choice([None, 0.0, 0.2, 0.5, 0.7, 0.7, 0.72, 0.69]),
                    "power_w": rng.choice([300.0, 650.0, 700.0]),
                    "gpu_util": rng.choice([None, 0.0, 5.0, 10.0, 90.0, 95.0, 100.0]),
                }
                for m in minutes
                if rng.random() > 0.05
            }
            for g in range(gpus)
        }
        assert stragglers_find(series, minutes) == _stragglers_by_definition(series, minutes)
