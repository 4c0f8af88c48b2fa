"""The simulated fleet: AcmeTrace-shaped distributions, GPUs that keep their state."""

from __future__ import annotations

import bisect
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from collectors.__main__ import main as collector_main
from collectors.agent import Agent
from collectors.backends.base import GPU_POS, NODE_POS
from collectors.backends.simulated import DEFAULT_CLUSTERS, SimulatedBackend, load_calibration
from collectors.calibrate import DEFAULT_CSV, calibrate
from collectors.schema import parse_batch
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


def run(backend: SimulatedBackend, rounds: int, step_s: float, t0: float = 1_700_000_000.0):
    return [backend.read(t0 + k * step_s) for k in range(rounds)]


ACME_CLUSTERS = ("seren", "kalos")
KS_MAX = 0.15  # the simulator's distributions within 0.15 of Acme's (KS distance)


def acme_cdf(metric: str) -> Callable[[float, bool], float]:
    """The fleet's CDF of `metric` by Acme: the equal mixture of Seren's and Kalos's (the
    default simulated fleet has as many GPUs in each), read from the calibration's quantiles.
    With `strict`, the share strictly below x (Acme's utilization has atoms at 0 and 100)."""
    calib = load_calibration()
    grid = [p / 100 for p in calib["percentiles"]]
    tables = [calib["clusters"][c][metric] for c in ACME_CLUSTERS]

    def cdf(x: float, strict: bool = False) -> float:
        find = bisect.bisect_left if strict else bisect.bisect_right
        shares = [grid[i - 1] if (i := find(q, x)) else 0.0 for q in tables]
        return sum(shares) / len(shares)

    return cdf


def ks_distance(samples: list[float], metric: str) -> float:
    """Kolmogorov-Smirnov distance between the samples and Acme's fleet CDF of `metric`,
    checked on both sides of every sample value and every calibrated quantile."""
    cdf = acme_cdf(metric)
    ordered = sorted(samples)
    n = len(ordered)
    calib = load_calibration()
    points = set(ordered) | {v for c in ACME_CLUSTERS for v in calib["clusters"][c][metric]}
    return max(
        max(
            abs(bisect.bisect_right(ordered, x) / n - cdf(x)),
            abs(bisect.bisect_left(ordered, x) / n - cdf(x, True)),
        )
        for x in points
    )


def fleet_values(rounds, column: str) -> list[float]:
    return [row[GPU_POS[column]] for readings in rounds for r in readings for row in r.gpu_rows]


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
    # The whole distributions, not only their shares at a few thresholds.
    assert ks_distance(utils, "gpu_util") <= KS_MAX
    assert ks_distance(powers, "gpu_power_w") <= KS_MAX


def test_a_run_starts_in_the_steady_state():
    """`--source simulated --count N` is shaped like Acme from its first rounds: the jobs
    running at the start are found mid-run (not all loading their checkpoints at once), so the
    first ten minutes of a run, pooled over ten runs, are within KS 0.15 of Acme's fleet."""
    rounds = []
    for seed in range(10):
        backend = SimulatedBackend(seed=seed)
        rounds += run(backend, 40, 15.0, t0=1_700_000_000.0 + 7919 * seed)
    utils = fleet_values(rounds, "gpu_util")
    assert len(utils) == 10 * 40 * 2 * 16 * 8
    assert ks_distance(utils, "gpu_util") <= KS_MAX
    assert ks_distance(fleet_values(rounds, "power_w"), "gpu_power_w") <= KS_MAX


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
    # The demo's clusters, named apart from the paper's Seren and Kalos they simulate.
    assert backend.node_ids[0] == ("sable", "sable-node-001")
    assert backend.node_ids[-1] == ("kestrel", "kestrel-node-016")
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


def test_history_is_replayed_at_the_step_asked_for(tmp_path):
    """`--history-minutes 2 --history-step-s 10`: two minutes of the past, rounds 10 s apart,
    all handed over before the ready file appears."""
    ready, out = tmp_path / "ready", tmp_path / "out.jsonl"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "collectors", "--source", "simulated", "--clusters", "c",
                "--nodes-per-cluster", "1", "--gpus-per-node", "2", "--stdout", "--seed", "1",
                "--history-minutes", "2", "--history-step-s", "10", "--interval", "60",
                "--ready-file", str(ready),
            ],
            cwd=ROOT, stdout=stdout, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_for(ready.exists, timeout=30)
            lines = out.read_text().splitlines()
        finally:
            proc.terminate()
            proc.wait(20)
    stamps = sorted(
        {row[1] for ln in lines if '"samples"' in ln for row in parse_batch(ln).samples}
    )
    # 12 rounds of history; the first live round may have followed the ready file already.
    assert len(stamps) in (12, 13)
    history = stamps[:12]
    assert {round(b - a, 6) for a, b in zip(history, history[1:], strict=False)} == {10.0}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--history-step-s", "10"], "--history-step-s only applies with --history-minutes"),
        (
            ["--history-minutes", "1", "--history-step-s", "0.5"],
            "--history-step-s 0.5: at least 1 s",
        ),
        (["--history-minutes", "1", "--history-step-s", "90"], "longer than the --history-minutes"),
        (["--history-minutes", "1", "--history-step-s", "0"], "'0' must be a positive number"),
        (["--history-minutes", "1", "--history-step-s", "ten"], "'ten' is not a number"),
    ],
)
def test_a_bad_history_step_is_refused_with_one_line_naming_it(flags, message, capsys):
    with pytest.raises(SystemExit) as exc:
        collector_main(["--source", "simulated", "--stdout", *flags])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


# --- Physics: power limits, inlet temperature, thermal inertia -------------------------------

STEP_S = 15.0  # Acme's sampling interval (docs/acme-workload.md section 1)
# A board may read a few percent over its enforced limit for a sample while its power
# controller catches a load step (NVML's reading is a 1 s average), never for long.
EXCURSION = 0.05
EXCURSION_SAMPLES = 2


@pytest.fixture(scope="module")
def an_hour():
    """One simulated hour of the default fleet at Acme's 15 s, and the backend (its nodes'
    inlet temperatures); rows by GPU in time order."""
    backend = SimulatedBackend(seed=11)
    by_gpu: dict[tuple[str, int], list] = {}
    for readings in run(backend, 240, STEP_S):
        for r in readings:
            for row in r.gpu_rows:
                by_gpu.setdefault((r.node, row[0]), []).append(row)
    inlet = {n.node: n.inlet_c for n in backend.nodes}
    return by_gpu, inlet


@pytest.fixture(scope="module")
def node_hour():
    """Half an hour of the default fleet: each node sample with its GPUs' rows."""
    backend = SimulatedBackend(seed=12)
    return [(r.node_row, r.gpu_rows) for readings in run(backend, 120, STEP_S) for r in readings]


def test_power_stays_within_the_enforced_limit(an_hour):
    """An A100-SXM4-80GB capped at 400 W does not draw 600 W: over an hour, a busy GPU reads
    at most a few percent over its limit, and never for more than a sample or two in a row;
    a capped GPU says so (SwPowerCap) and runs its SM clock below boost."""
    by_gpu, _inlet = an_hour
    capped = 0
    for rows in by_gpu.values():
        run_over = 0
        for row in rows:
            power, limit = row[GPU_POS["power_w"]], row[GPU_POS["power_limit_w"]]
            assert limit == 400.0
            assert 0 < power <= limit * (1 + EXCURSION), power
            run_over = run_over + 1 if power > limit else 0
            assert run_over <= EXCURSION_SAMPLES
            if row[GPU_POS["clocks_event_reasons"]] & 0x4:  # SwPowerCap
                capped += 1
                assert power >= 0.97 * limit
                assert row[GPU_POS["sm_clock_mhz"]] < 1410
    # Busy pretraining GPUs do reach the limit (Acme's busiest tenth asks 400 W and more).
    assert capped > 1000


def test_an_idle_gpu_sits_some_degrees_above_its_inlet():
    """Whatever the air coming in, an idle GPU is warmer than it: about 5-10 °C above inlet at
    ~60 W, not 22-24 °C under every inlet."""
    for inlet in (18.0, 32.0):
        backend = SimulatedBackend(["seren"], 4, 8, seed=2, jobs=False, inlet_c=(inlet, inlet))
        idle = [
            row[GPU_POS["gpu_temp_c"]]
            for readings in run(backend, 40, STEP_S)
            for r in readings
            for row in r.gpu_rows
            if row[GPU_POS["power_w"]] < 80
        ]
        assert len(idle) > 100
        assert min(idle) >= inlet + 3
        assert statistics.median(idle) <= inlet + 12


def test_a_gpu_cools_slowly_after_its_load_stops(an_hour):
    """Thermal inertia: a GPU that stops working at 55 °C or more is still well above its idle
    temperature two minutes later (a heatsink's time constant is minutes), and has not risen."""
    by_gpu, inlet = an_hour
    checked = 0
    lag = int(120 / STEP_S)
    for (node, _index), rows in by_gpu.items():
        temps = [row[GPU_POS["gpu_temp_c"]] for row in rows]
        utils = [row[GPU_POS["gpu_util"]] for row in rows]
        for k in range(1, len(rows) - lag):
            hot = temps[k - 1]
            if utils[k - 1] < 90 or hot < 55 or any(u > 0 for u in utils[k : k + lag + 1]):
                continue
            later = temps[k + lag]
            assert later <= hot
            # With the GPU's idle level some 5-10 °C over inlet, over a quarter of the way down
            # is still to go after two minutes (a first-order lag with a time constant of 2
            # minutes keeps e^-1, 37%).
            assert later - inlet[node] >= 0.25 * (hot - inlet[node]), (node, hot, later)
            checked += 1
    assert checked >= 20


def test_every_value_stays_in_its_physical_range(an_hour):
    by_gpu, inlet = an_hour
    for (node, _index), rows in by_gpu.items():
        for row in rows:
            assert 0 <= row[GPU_POS["gpu_util"]] <= 100
            assert 0 <= row[GPU_POS["mem_copy_util"]] <= 100
            for ratio in ("sm_active", "sm_occupancy", "tensor_active", "dram_active"):
                assert 0 <= row[GPU_POS[ratio]] <= 1
            assert 0 < row[GPU_POS["power_w"]] <= row[GPU_POS["power_limit_w"]] * 1.05
            assert inlet[node] < row[GPU_POS["gpu_temp_c"]] <= 90
            assert inlet[node] < row[GPU_POS["mem_temp_c"]] <= 95
            assert 0 <= row[GPU_POS["fb_used_bytes"]] <= row[GPU_POS["fb_total_bytes"]]
            assert 0 < row[GPU_POS["sm_clock_mhz"]] <= 1410


def test_a_server_draws_more_than_its_gpus(node_hour):
    """IPMI's whole-server power covers its GPUs and more (CPUs, NVSwitches, fans, PSU losses):
    never under the GPUs' own power, within a DGX A100's 6.5 kW, and not kilowatts above the
    GPUs' power when they idle."""
    busy_nodes = 0
    for node_row, gpu_rows in node_hour:
        gpus = sum(row[GPU_POS["power_w"]] for row in gpu_rows)
        server = node_row[NODE_POS["server_power_w"]]
        assert gpus + 500 <= server <= 6500, (gpus, server)
        if gpus < 8 * 80:
            assert server <= gpus + 2500, (gpus, server)
        busy_nodes += gpus > 2500
    assert busy_nodes > 100


def test_a_demo_cluster_simulates_its_paper_twins_workload():
    from collectors.backends.simphases import paper_twin
    from collectors.backends.simworkload import CLUSTER_MIX

    assert [paper_twin(c) for c in DEFAULT_CLUSTERS] == ["seren", "kalos"]
    assert not {c.lower() for c in DEFAULT_CLUSTERS} & {"seren", "kalos"}
    assert paper_twin("kalos") == "kalos" and CLUSTER_MIX[paper_twin("Kestrel")]
