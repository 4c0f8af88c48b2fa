"""The planner (plain functions, no Django) and `manage.py eval_plan`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from webapp.evaluation.estimates import (
    DEFAULT_SUITE,
    HUMANEVAL_LOAD_SHARE,
    HUMANEVAL_METRICS_SHARE,
    Estimate,
    default_suite,
    estimates_learn,
    estimates_parse,
)
from webapp.evaluation.planner import (
    Hardware,
    PlanError,
    baseline_plan,
    decoupled_plan,
    plans_compare,
)


def test_paper_speedups_on_one_and_four_nodes():
    """The paper's 63 datasets with its phase shares: at least 1.3x on 1 node, 1.8x on 4."""
    suite = default_suite(63)
    assert len(suite) == len(DEFAULT_SUITE) == 63
    total = sum(e.total_s for e in suite)
    assert sum(e.load_s for e in suite) / total == pytest.approx(HUMANEVAL_LOAD_SHARE)
    assert sum(e.metrics_s for e in suite) / total == pytest.approx(HUMANEVAL_METRICS_SHARE)
    one = plans_compare(suite, Hardware(1, 8))
    four = plans_compare(suite, Hardware(4, 8))
    print(f"\npredicted speedup: 1 node {one['speedup']:.2f}x, 4 nodes {four['speedup']:.2f}x")
    assert one["speedup"] >= 1.3
    assert four["speedup"] >= 1.8


def test_identical_trials_on_one_gpu_gain_only_the_removed_phases():
    """One GPU, equal datasets: the decoupled plan saves the load and metrics of every trial
    but the last one's metrics and one copy of the model: the arithmetic, by hand."""
    suite = [Estimate(f"d{i}", 10.0, 20.0, 5.0) for i in range(4)]
    hw = Hardware(1, 1, dispatch_s=0.0, dependency_s=0.0)
    base = baseline_plan(suite, hw)
    assert base.makespan_s == pytest.approx(4 * 35.0)
    dec = decoupled_plan(suite, hw)
    # A lone GPU: the measured load is one full-speed copy; the PCIe read is 1/ratio of it.
    copy_s = 10.0
    read_s = copy_s * (25.0 / 8) / 31.5
    assert dec.makespan_s == pytest.approx(copy_s + 4 * (read_s + 20.0) + 5.0)
    gpu = dec.gpu_time_s()
    assert gpu["metrics"] == 0.0 and gpu["infer"] == pytest.approx(80.0)
    assert base.gpu_time_s()["metrics"] == pytest.approx(20.0)


def test_long_datasets_are_split_and_balanced_longest_first():
    suite = [Estimate("long", 10.0, 400.0, 8.0)] + [
        Estimate(f"s{i}", 10.0, 50.0, 2.0) for i in range(7)
    ]
    hw = Hardware(1, 8, dispatch_s=0.0, dependency_s=0.0)
    dec = decoupled_plan(suite, hw)
    shards = [j for j in dec.jobs if j.kind == "infer" and j.datasets[0][0] == "long"]
    assert len(shards) > 1
    assert sum(j.phases["infer"] for j in shards) == pytest.approx(400.0)
    # Every shard of a dataset has its own metric job, after its inference.
    metrics = {j.depends_on[0]: j for j in dec.jobs if j.kind == "metrics"}
    for shard in shards:
        assert metrics[shard.key].start_s >= shard.end_s
    # Balanced: no GPU ends far past the fair share of the work.
    fair = sum(j.phases["infer"] + j.phases["load"] for j in dec.jobs if j.gpu is not None) / 8
    gpu_end = max(j.end_s for j in dec.jobs if j.gpu is not None)
    assert gpu_end < 1.5 * fair
    base = baseline_plan(suite, hw)
    assert base.makespan_s == pytest.approx(418.0)  # the long dataset, coupled, alone
    assert dec.makespan_s < base.makespan_s / 2


def test_small_datasets_are_merged_into_one_trial():
    suite = [Estimate(f"tiny{i}", 10.0, 0.5, 0.5) for i in range(6)]
    dec = decoupled_plan(suite, Hardware(1, 8))
    infers = [j for j in dec.jobs if j.kind == "infer"]
    assert len(infers) < 6
    assert sorted(d[0] for j in infers for d in j.datasets) == [f"tiny{i}" for i in range(6)]


def test_jobs_depend_on_their_loader_and_inference():
    dec = decoupled_plan(default_suite(10), Hardware(2, 4))
    keys = {j.key: j for j in dec.jobs}
    for job in dec.jobs:
        for dep in job.depends_on:
            assert keys[dep].end_s <= job.start_s
        if job.kind == "infer":
            assert job.depends_on == [f"load-{job.node}"]
    assert sum(1 for j in dec.jobs if j.kind == "load") == 2


def test_model_size_sets_the_copy_times():
    """A 140 GB checkpoint (70B in bf16) takes longer to load than a 14 GB one, both ways."""
    suite = default_suite(8)
    small = plans_compare(suite, Hardware(1, 8, model_size_gb=14))
    big = plans_compare(suite, Hardware(1, 8, model_size_gb=140))
    assert big["baseline"]["makespan_s"] > small["baseline"]["makespan_s"]
    assert big["decoupled"]["makespan_s"] > small["decoupled"]["makespan_s"]
    assert big["speedup"] > small["speedup"]  # the more there is to load, the more it saves


@pytest.mark.parametrize(
    ("suite", "hardware", "message"),
    [
        ([], Hardware(1, 8), "none given"),
        ([Estimate("a", 1, 1, 1), Estimate("a", 1, 1, 1)], Hardware(1, 8), "listed twice"),
        ([Estimate("a", 1, -1, 1)], Hardware(1, 8), "negative"),
        ([Estimate("a", 1, 1, 1)], Hardware(0, 8), "at least 1"),
        ([Estimate("a", 1, 1, 1)], Hardware(1, 8, model_size_gb=0), "model size"),
    ],
)
def test_bad_plans_are_refused(suite, hardware, message):
    with pytest.raises(PlanError, match=message):
        plans_compare(suite, hardware)


def test_estimates_file_and_learning():
    parsed = estimates_parse("dataset,infer_s,metrics_s\nfoo,10,2\nbar,5,1\n")
    assert [(e.dataset, e.infer_s, e.source) for e in parsed] == [
        ("foo", 10.0, "given"),
        ("bar", 5.0, "given"),
    ]
    assert [e.dataset for e in estimates_parse("# suite\nmmlu\ngsm8k\n")] == ["mmlu", "gsm8k"]
    with pytest.raises(ValueError, match="line 2 .foo.: not a number"):
        estimates_parse("dataset,infer_s,metrics_s\nfoo,ten,2\n")
    with pytest.raises(ValueError, match="missing metrics_s"):
        estimates_parse("dataset,infer_s\nfoo,1\n")
    known = {e.dataset: e for e in default_suite(2)}
    first = estimates_learn(known, [Estimate("mmlu", 30.0, 100.0, 4.0)])
    assert first["mmlu"].infer_s == 100.0 and first["mmlu"].source == "learned"
    second = estimates_learn(first, [Estimate("mmlu", 30.0, 200.0, 4.0)])
    assert second["mmlu"].infer_s == pytest.approx(150.0)  # a moving average, not a swing


def _eval_plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "eval_plan", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_eval_plan_prints_both_plans_and_the_speedup(tmp_path):
    speedups = {}
    for nodes in (1, 4):
        proc = _eval_plan(
            "--datasets", "63", "--nodes", str(nodes), "--gpus-per-node", "8", "--json"
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert result["baseline"]["jobs"] == 63
        assert {j["kind"] for j in result["decoupled"]["plan"]} == {"load", "infer", "metrics"}
        speedups[nodes] = result["speedup"]
    print(f"\neval_plan --json speedup: 1 node {speedups[1]}x, 4 nodes {speedups[4]}x")
    assert speedups[1] >= 1.3 and speedups[4] >= 1.8
    listed = tmp_path / "suite.txt"
    listed.write_text("mmlu\ngsm8k\nhumaneval\n")
    proc = _eval_plan("--datasets", str(listed), "--nodes", "1", "--gpus-per-node", "2")
    assert proc.returncode == 0 and "speedup" in proc.stdout


def test_eval_plan_refuses_bad_input_in_one_line(tmp_path):
    twice = tmp_path / "twice.txt"
    twice.write_text("mmlu\nmmlu\n")
    for args, message in [
        (("--datasets", str(twice)), "'mmlu' is listed twice"),
        (("--datasets", str(tmp_path / "nope.txt")), "cannot read"),
        (("--datasets", "0"), "not between 1 and 63"),
    ]:
        proc = _eval_plan(*args, "--nodes", "1", "--gpus-per-node", "8")
        assert proc.returncode != 0
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
