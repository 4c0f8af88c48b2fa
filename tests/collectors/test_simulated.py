"""The simulated fleet: AcmeTrace-shaped distributions, GPUs that keep their state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.agent import Agent
from collectors.backends.base import GPU_POS, NODE_POS
from collectors.backends.simulated import SimulatedBackend, load_calibration
from collectors.calibrate import DEFAULT_CSV, calibrate
from collectors.schema import parse_batch


def run(backend: SimulatedBackend, rounds: int, step_s: float, t0: float = 1_700_000_000.0):
    return [backend.read(t0 + k * step_s) for k in range(rounds)]


def test_utilization_and_power_match_acmetrace():
    calib = load_calibration()
    expected = {
        key: sum(calib["shares"][c][key] for c in ("seren", "kalos")) / 2
        for key in ("gpu_util_le_1pct", "gpu_util_ge_99pct", "gpu_power_le_80w")
    }
    backend = SimulatedBackend(seed=7)
    utils, powers = [], []
    # Rounds far apart (10 min) so the estimate is not dominated by a few long-lived states.
    for readings in run(backend, 60, 600.0):
        for r in readings:
            utils += [row[GPU_POS["gpu_util"]] for row in r.gpu_rows]
            powers += [row[GPU_POS["power_w"]] for row in r.gpu_rows]
    n = len(utils)
    assert n == 60 * 2 * 16 * 8
    idle = sum(u <= 1 for u in utils) / n
    busy = sum(u >= 99 for u in utils) / n
    idle_power = [p for p in powers if p <= 80]
    # Acme: GPUs sit near 0 % or near 100 %, about a third idle near 60 W.
    assert idle == pytest.approx(expected["gpu_util_le_1pct"], abs=0.07)
    assert busy == pytest.approx(expected["gpu_util_ge_99pct"], abs=0.07)
    assert len(idle_power) / n == pytest.approx(expected["gpu_power_le_80w"], abs=0.07)
    assert 0.2 <= len(idle_power) / n <= 0.45
    assert 50 <= sorted(idle_power)[len(idle_power) // 2] <= 70  # "near 60 W"
    assert (idle + busy) > 0.7  # bimodal: little in between


def test_gpus_keep_their_state_from_one_round_to_the_next():
    backend = SimulatedBackend(["seren"], 16, 8, seed=3)
    rounds = run(backend, 30, 10.0)
    stays, busy = 0, 0
    for before, after in zip(rounds, rounds[1:], strict=False):
        for r0, r1 in zip(before, after, strict=True):
            for g0, g1 in zip(r0.gpu_rows, r1.gpu_rows, strict=True):
                if g0[GPU_POS["gpu_util"]] >= 99:
                    busy += 1
                    stays += g1[GPU_POS["gpu_util"]] >= 90
    assert busy > 100
    assert stays / busy > 0.9
    # ... yet values move: power is not frozen.
    powers = {r[0].gpu_rows[0][GPU_POS["power_w"]] for r in rounds}
    assert len(powers) > 20


def test_energy_counter_integrates_power():
    backend = SimulatedBackend(["kalos"], 2, 8, seed=5)
    rounds = run(backend, 5, 10.0)
    for k in range(1, 5):
        for g0, g1 in zip(rounds[k - 1][0].gpu_rows, rounds[k][0].gpu_rows, strict=True):
            delta = g1[GPU_POS["energy_mj"]] - g0[GPU_POS["energy_mj"]]
            assert delta == pytest.approx(g1[GPU_POS["power_w"]] * 10 * 1000, abs=2)


def test_fleet_layout_and_batches_pass_the_wire_schema():
    backend = SimulatedBackend(seed=1)
    assert backend.node_ids[0] == ("seren", "seren-node-001")
    assert backend.node_ids[-1] == ("kalos", "kalos-node-016")
    sent: list[str] = []
    agent = Agent(backend, lambda c, n: f"token-of-{n}", lambda _i, t: sent.append(t))
    agent.run(3, backfill=True)
    batches = [parse_batch(t) for t in sent]
    assert len(batches) == 3 * 32  # one batch per node per round
    assert {b.source for b in batches} == {"simulated"}
    first = batches[0]
    assert first.gpus[0].name == "NVIDIA A100-SXM4-80GB" and len(first.samples) == 8
    assert first.node_samples[0][NODE_POS["gpu_count"]] == 8
    uuids = {g.uuid for b in batches for g in b.gpus}
    assert len(uuids) == 256  # stable, distinct per GPU


@pytest.mark.skipif(not DEFAULT_CSV.exists(), reason="AcmeTrace CSV not on this machine")
def test_committed_calibration_is_what_the_script_derives():
    committed = json.loads(
        (Path(__file__).resolve().parents[2] / "collectors/data/acme_calibration.json").read_text()
    )
    assert calibrate(DEFAULT_CSV) == committed
