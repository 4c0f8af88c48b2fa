"""deploy/healthcheck/: the node checks Vigil's recovery runs when a failure blames no node.

Each script prints `VIGIL-HEALTH <node> PASS|FAIL <detail>` per node; these tests read those
lines as an operator (or the recovery app) would. No GPU here: the pairwise test's per-pair
command and dcgmi are replaced by small scripts whose outcome per node the test sets, and the
dcgmi output is recorded real output (tests/data/healthcheck/README.md). The last tests submit
both scripts to a real three-node Slurm exactly as the recovery app does
(`sbatch --wait --parsable -N 3 -w n1,n2,n3 --exclusive -o <file> <script> [args]`).
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.realparts import missing
from tests.slurm import (
    SlurmCluster,
    slurm_missing_reason,
)

HEALTHCHECK = ROOT / "deploy" / "healthcheck"
NCCL_SCRIPT = HEALTHCHECK / "nccl_pairwise.py"
DCGM_SCRIPT = HEALTHCHECK / "dcgm_diag.py"
DATA = ROOT / "tests" / "data" / "healthcheck"
# DCGM's own failure message (NVIDIA/go-dcgm issue #52), put into a recorded result.
CUDA_CONTEXT_WARNING = (
    "GPU 3 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU. "
    "Restart DCGM. Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable device(s) "
    "is/are busy or unavailable'."
)


def load(path: Path):
    """The script as a module (it is a standalone file, not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nccl = load(NCCL_SCRIPT)
dcgm = load(DCGM_SCRIPT)


def names(count: int) -> list[str]:
    return [f"n{i}" for i in range(1, count + 1)]


def simulate(nodes: list[str], bad: set[str], *, alone_ok: bool = False):
    """Run the planner as the driver does, a pair passing when neither node is bad; a bad
    node also fails alone unless `alone_ok` (a fault between nodes, e.g. its network card).
    Returns (the rounds run, the verdicts)."""
    results = {}
    plan = nccl.rounds(nodes)
    ran = 0
    while ran < len(plan):
        for a, b in plan[ran]:
            passed = (alone_ok and a == b) or not ({a, b} & bad)
            results[(a, b)] = nccl.PairResult(passed, "" if passed else "exit 1")
        ran += 1
        plan = nccl.rounds(nodes, results)
    return plan, nccl.verdicts(nodes, results)


def failed(verdicts) -> set[str]:
    return {n for n, v in verdicts.items() if not v.passed}


# --- the pairing and the verdict ----------------------------------------------------------------


def test_round_one_pairs_neighbours_and_tests_an_odd_node_alone():
    assert nccl.rounds(names(4)) == [[("n1", "n2"), ("n3", "n4")]]
    assert nccl.rounds(names(5)) == [[("n1", "n2"), ("n3", "n4"), ("n5", "n5")]]


def test_healthy_even_nodes_all_pass_in_one_round():
    plan, verdicts = simulate(names(4), set())
    assert plan == [[("n1", "n2"), ("n3", "n4")]]
    assert verdicts == {
        "n1": nccl.Verdict(True, "passed with n2"),
        "n2": nccl.Verdict(True, "passed with n1"),
        "n3": nccl.Verdict(True, "passed with n4"),
        "n4": nccl.Verdict(True, "passed with n3"),
    }


def test_one_bad_node_fails_with_a_known_good_partner_and_its_partner_is_cleared():
    plan, verdicts = simulate(names(4), {"n3"})
    # Round two re-pairs each node of the failed pair with a node that passed.
    assert plan == [[("n1", "n2"), ("n3", "n4")], [("n3", "n1"), ("n4", "n2")]]
    assert failed(verdicts) == {"n3"}
    assert verdicts["n3"].detail == "failed with known-good n1: exit 1"
    assert verdicts["n4"].detail == "passed with n2"


def test_the_odd_node_is_paired_with_a_node_that_passed():
    plan, verdicts = simulate(names(5), set())
    assert plan[1] == [("n5", "n1")]
    assert verdicts["n5"] == nccl.Verdict(True, "passed with n1")


def test_an_odd_node_whose_fault_shows_only_between_nodes_fails_with_a_good_partner():
    _, verdicts = simulate(names(5), {"n5"}, alone_ok=True)
    assert failed(verdicts) == {"n5"}
    assert verdicts["n5"].detail == "failed with known-good n1: exit 1"


def test_a_lone_node_is_tested_alone():
    assert simulate(["n1"], set())[1] == {"n1": nccl.Verdict(True, "passed alone")}
    assert simulate(["n1"], {"n1"})[1] == {"n1": nccl.Verdict(False, "failed alone: exit 1")}


def test_two_nodes_a_bad_one_that_fails_alone_is_the_only_one_failed():
    plan, verdicts = simulate(names(2), {"n2"})
    # No node passed round one: each is tested alone in round two.
    assert plan == [[("n1", "n2")], [("n1", "n1"), ("n2", "n2")]]
    assert verdicts == {
        "n1": nccl.Verdict(True, "its failed pairs are explained by n2 (passed alone)"),
        "n2": nccl.Verdict(False, "failed alone: exit 1"),
    }


def test_two_nodes_whose_pair_fails_though_each_passes_alone_both_fail():
    _, verdicts = simulate(names(2), {"n2"}, alone_ok=True)
    assert failed(verdicts) == {"n1", "n2"}
    assert "the results cannot tell which node of those pairs is bad" in verdicts["n1"].detail


def test_two_bad_nodes_are_both_found_and_round_two_runs_in_waves():
    plan, verdicts = simulate(names(6), {"n1", "n3"})
    # Four suspects, two good nodes: two waves, each good node once per wave.
    assert plan[1:] == [[("n1", "n5"), ("n2", "n6")], [("n3", "n5"), ("n4", "n6")]]
    assert failed(verdicts) == {"n1", "n3"}


def test_two_bad_nodes_paired_together_both_fail_and_no_good_node_does():
    _, verdicts = simulate(names(4), {"n1", "n2"})
    assert failed(verdicts) == {"n1", "n2"}
    assert verdicts["n1"].detail == "failed with known-good n3: exit 1"


@pytest.mark.parametrize("count", [3, 4, 5])
def test_when_every_node_is_bad_every_node_fails(count):
    _, verdicts = simulate(names(count), set(names(count)))
    assert failed(verdicts) == set(names(count))


def test_when_no_pair_passes_nodes_are_re_paired_with_new_partners():
    plan, verdicts = simulate(names(3), {"n1"}, alone_ok=True)
    assert plan == [[("n1", "n2"), ("n3", "n3")], [("n1", "n3"), ("n2", "n2")]]
    # n1 failed with both partners: the one bad node that explains both failures.
    assert failed(verdicts) == {"n1"}
    assert "the fewest bad nodes that explain the failed pairs include it" in verdicts["n1"].detail


@pytest.mark.parametrize("count", range(1, 9))
def test_one_bad_node_anywhere_is_found_alone_and_no_bad_node_that_fails_alone_passes(count):
    """The claims in deploy/healthcheck/README.md, for every placement of bad nodes."""
    nodes = names(count)
    for bad in nodes:
        assert failed(simulate(nodes, {bad})[1]) == {bad}
        between = failed(simulate(nodes, {bad}, alone_ok=True)[1])
        if count == 1:
            assert between == set()  # a lone node's network cannot be tested
        elif count == 2:
            assert between == set(nodes)  # cannot tell which end of the link
        else:
            assert between == {bad}
    for size in range(2, count + 1):
        for bad in itertools.combinations(nodes, size):
            assert set(bad) <= failed(simulate(nodes, set(bad))[1]), bad


def test_a_verdict_line_is_one_line_whatever_the_detail():
    line = nccl.health_line("n7", nccl.Verdict(False, "exit 1:\nNCCL WARN\tremote " + "x" * 500))
    assert line.startswith("VIGIL-HEALTH n7 FAIL exit 1: NCCL WARN remote xxx")
    assert "\n" not in line and "\t" not in line
    assert len(line) < 400
    assert nccl.health_line("n1", nccl.Verdict(True, "")) == "VIGIL-HEALTH n1 PASS"


# Each script is copied alone to the node by sbatch (which refuses a script holding a NUL
# byte, so no zipapp either): the few helpers both need are written in each, and must agree.


@pytest.mark.parametrize("helper", ["_stop_group", "_last_line"])
def test_the_helpers_each_script_carries_alone_are_the_same(helper):
    assert inspect.getsource(getattr(nccl, helper)) == inspect.getsource(getattr(dcgm, helper))


@pytest.mark.parametrize("passed", [True, False])
@pytest.mark.parametrize("detail", ["", "exit 1:\nNCCL WARN\tremote " + "x" * 500])
def test_both_scripts_write_the_same_verdict_line(passed, detail):
    line = nccl.health_line("n7", nccl.Verdict(passed, detail))
    assert line == dcgm.health_line("n7", passed, detail)


def test_both_scripts_read_the_same_node_list():
    assert nccl.job_nodes(" n1, n2,,n3 ") == dcgm.job_nodes(" n1, n2,,n3 ") == ["n1", "n2", "n3"]


def test_the_default_pair_command_runs_one_nccl_worker_per_gpu_on_both_nodes():
    args = nccl.parse_args(["--gpus-per-node", "4", "--size-mb", "128", "--timeout-s", "60"])
    command = nccl.worker_command(("n3", "n4"), 29501, args, "/opt/check/nccl_pairwise.py")
    assert command[:7] == [
        "srun",
        "-N2",
        "-w",
        "n3,n4",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
        "--kill-on-bad-exit=1",
    ]
    assert command[7:] == [
        sys.executable,
        "/opt/check/nccl_pairwise.py",
        "--worker",
        "--master-port",
        "29501",
        "--size-mb",
        "128",
        "--timeout-s",
        "60",
    ]
    assert nccl.worker_command(("n5", "n5"), 29502, args, "w.py")[1:4] == ["-N1", "-w", "n5"]


def test_the_worker_copy_goes_to_a_private_folder_no_planted_link_can_redirect(
    tmp_path, monkeypatch
):
    # srun and sbcast as on a one-node allocation: the command runs here, the copy is a cp.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n'
    )
    (bin_dir / "sbcast").write_text('#!/bin/sh\n[ "$1" = --force ] && shift\nexec cp "$1" "$2"\n')
    for tool in ("srun", "sbcast"):
        (bin_dir / tool).chmod(0o755)
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    # Another user of the node plants links where a predictable copy would go.
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    for name in ("vigil-nccl-pairwise-4242.py", "vigil-nccl-pairwise-4242"):
        (shared_tmp / name).symlink_to(victim)
    dest = Path(nccl.broadcast_self())
    assert victim.read_text() == "untouched\n"
    assert dest.read_bytes() == NCCL_SCRIPT.read_bytes() and not dest.is_symlink()
    assert dest.parent.parent == shared_tmp and (dest.parent.stat().st_mode & 0o777) == 0o700
    assert "4242" not in dest.parent.name  # a name no one can plant ahead of the check


# --- the pairwise driver, end to end in local mode ------------------------------------------------


@pytest.fixture
def fake_pair(tmp_path) -> Path:
    """A pair command failing when a node named in $FAKE_BAD is in the pair, hanging when
    one in $FAKE_HANG is."""
    script = tmp_path / "fake-pair"
    script.write_text(
        "#!/bin/sh\n"
        'for node in "$1" "$2"; do\n'
        '  case ",$FAKE_HANG," in *",$node,"*) exec sleep 600;; esac\n'
        '  case ",$FAKE_BAD," in *",$node,"*)\n'
        '    echo "NCCL WARN NET/IB : Got completion from peer $node with error 12" >&2; exit 1;;\n'
        "  esac\n"
        "done\n"
    )
    script.chmod(0o755)
    return script


def run_script(script: Path, *args: str, env: dict | None = None, timeout: float = 120):
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=timeout,
    )


def health_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("VIGIL-HEALTH ")]


def test_the_driver_prints_a_verdict_per_node_and_fails_the_bad_one(fake_pair):
    proc = run_script(
        NCCL_SCRIPT,
        "--nodes",
        "n1,n2,n3,n4,n5",
        "--pair-cmd",
        f"{fake_pair} {{a}} {{b}}",
        env={"FAKE_BAD": "n2"},
    )
    assert proc.returncode == 1, proc.stderr
    assert health_lines(proc.stdout) == [
        "VIGIL-HEALTH n1 PASS passed with n3",
        "VIGIL-HEALTH n2 FAIL failed with known-good n4: exit 1: NCCL WARN NET/IB : Got "
        "completion from peer n2 with error 12",
        "VIGIL-HEALTH n3 PASS passed with n4",
        "VIGIL-HEALTH n4 PASS passed with n3",
        "VIGIL-HEALTH n5 PASS passed with n3",
    ]
    assert "round 2 (wave 2): n5+n3" in proc.stderr
    assert "5 nodes, 1 failed: n2" in proc.stderr


def test_a_healthy_check_exits_zero(fake_pair):
    proc = run_script(NCCL_SCRIPT, "--nodes", "a,b", "--pair-cmd", f"{fake_pair} {{a}} {{b}}")
    assert proc.returncode == 0, proc.stderr
    assert health_lines(proc.stdout) == [
        "VIGIL-HEALTH a PASS passed with b",
        "VIGIL-HEALTH b PASS passed with a",
    ]


def test_a_pair_that_hangs_is_stopped_at_the_timeout_and_fails(fake_pair):
    proc = run_script(
        NCCL_SCRIPT,
        "--nodes",
        "n1,n2",
        "--timeout-s",
        "2",
        "--pair-cmd",
        f"{fake_pair} {{a}} {{b}}",
        env={"FAKE_HANG": "n2"},
    )
    assert proc.returncode == 1
    assert health_lines(proc.stdout) == [
        "VIGIL-HEALTH n1 PASS its failed pairs are explained by n2 (passed alone)",
        "VIGIL-HEALTH n2 FAIL failed alone: timed out after 2 s (a hang)",
    ]


def test_the_pair_command_template_names_the_nodes_and_their_count(tmp_path):
    record = tmp_path / "calls"
    proc = run_script(
        NCCL_SCRIPT,
        "--nodes",
        "n1,n2,n3",
        "--pair-cmd",
        f"sh -c 'echo \"$0 $1\" >> {record}' {{nodes}} {{num_nodes}}",
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(record.read_text().splitlines()) == ["n1,n2 2", "n3 1", "n3,n1 2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no nodes: pass --nodes or run inside a Slurm allocation"),
        (["--nodes", "n1", "--timeout-s", "0"], "--timeout-s must be at least 1, got 0"),
    ],
)
def test_bad_usage_exits_2_with_one_line_and_no_verdicts(args, message):
    proc = run_script(NCCL_SCRIPT, *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert health_lines(proc.stdout) == []


def test_the_worker_mode_refuses_to_run_outside_srun():
    proc = run_script(NCCL_SCRIPT, "--worker", "--master-port", "29500")
    assert proc.returncode == 2
    assert "--worker runs under srun (SLURM_STEP_NODELIST) with --master-port" in proc.stderr


# --- dcgmi diag: the verdict from its JSON --------------------------------------------------------


def dcgm4_document(test: dict) -> dict:
    """The DCGM 4 document (NVIDIA's dcgm_diag_schema.json) around one recorded test."""
    return {
        "DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]},
        "metadata": {"version": "4.1.1"},
    }


def dcgm4_test() -> dict:
    return json.loads((DATA / "dcgmi-diag-dcgm-4-test-excerpt.json").read_text())


def dcgm3_output() -> str:
    return (DATA / "dcgmi-diag-dcgm-3.1.0.txt").read_text()


def test_a_passing_dcgm_3_run_passes_despite_the_line_before_its_json():
    assert dcgm.diag_verdict(dcgm3_output(), 0) == (True, "dcgmi diag: 10 passed")


def test_a_passing_dcgm_4_test_passes():
    output = json.dumps(dcgm4_document(dcgm4_test()), indent=4)
    assert dcgm.diag_verdict(output, 0) == (True, "dcgmi diag: 1 passed")


def test_a_failing_gpu_in_a_dcgm_4_run_fails_the_node_with_the_test_name_and_gpu():
    test = dcgm4_test()
    test["results"][3]["status"] = "Fail"
    test["results"][3]["warnings"] = [
        {"error_category": 0, "error_id": 0, "error_severity": 0, "warning": CUDA_CONTEXT_WARNING}
    ]
    test["test_summary"]["status"] = "Fail"
    passed, detail = dcgm.diag_verdict(json.dumps(dcgm4_document(test)), 226)
    assert passed is False
    assert detail.startswith(
        "dcgmi diag: diagnostic (GPU 3: GPU 3 Error using CUDA API cuCtxCreate Check DCGM"
    )
    assert detail.endswith(") failed")


def test_a_failing_gpu_in_a_dcgm_3_run_fails_the_node():
    text = dcgm3_output()
    start = text.index("{")
    document = json.loads(text[start:])
    software = document["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]
    software["results"][5]["status"] = "FAIL"
    assert dcgm.diag_verdict(json.dumps(document), 226) == (
        False,
        "dcgmi diag: software (GPU 5) failed",
    )


def test_a_skipped_test_does_not_fail_the_node():
    test = dcgm4_test()
    skipped = copy.deepcopy(test)
    skipped["name"] = "pcie"
    for result in skipped["results"]:
        result["status"] = "Skip"
    document = dcgm4_document(test)
    document["DCGM Diagnostic"]["test_categories"][0]["tests"].append(skipped)
    assert dcgm.diag_verdict(json.dumps(document), 0) == (
        True,
        "dcgmi diag: 1 passed, 1 skipped",
    )


@pytest.mark.parametrize(
    ("output", "returncode", "detail"),
    [
        (
            "Error: unable to establish a connection to the specified host: localhost",
            255,
            "dcgmi diag printed no JSON result (exit 255): Error: unable to establish a "
            "connection to the specified host: localhost",
        ),
        (
            json.dumps({"DCGM Diagnostic": {"runtime_error": "NVVS could not start"}}),
            226,
            "dcgmi diag runtime error: NVVS could not start",
        ),
        (
            json.dumps({"DCGM Diagnostic": {"test_categories": []}}),
            0,
            "dcgmi diag ran no test (exit 0)",
        ),
    ],
)
def test_a_run_that_did_not_test_the_node_fails_it(output, returncode, detail):
    assert dcgm.diag_verdict(output, returncode) == (False, detail)


def test_a_non_zero_exit_with_no_failing_test_fails_the_node():
    output = json.dumps(dcgm4_document(dcgm4_test()))
    assert dcgm.diag_verdict(output, 226) == (
        False,
        "dcgmi diag exited 226 though no test failed (1 passed)",
    )


# --- dcgmi diag: the driver, end to end with a fake srun and dcgmi --------------------------------


@pytest.fixture
def fake_dcgmi(tmp_path) -> tuple[Path, Path]:
    """A dcgmi printing <results>/<node>.json for the node srun runs it on (SLURMD_NODENAME,
    as slurmd sets it) and exiting with <results>/<node>.rc; it insists on `diag -r 2 -j`."""
    results = tmp_path / "dcgmi-results"
    results.mkdir()
    script = tmp_path / "fake-dcgmi"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$*" = "diag -r 2 -j" ] || { echo "fake dcgmi: unexpected arguments: $*" >&2; exit 64; }\n'
        f'cat "{results}/$SLURMD_NODENAME.json"\n'
        f'exit "$(cat "{results}/$SLURMD_NODENAME.rc")"\n'
    )
    script.chmod(0o755)
    return script, results


def dcgmi_results(results: Path, failing: set[str], nodes: list[str]) -> None:
    """Recorded passing output for each node; a failing GPU 3 on the `failing` ones."""
    for node in nodes:
        test = dcgm4_test()
        rc = 0
        if node in failing:
            test["results"][3]["status"] = "Fail"
            test["results"][3]["warnings"] = [{"warning": CUDA_CONTEXT_WARNING}]
            rc = 226
        (results / f"{node}.json").write_text(json.dumps(dcgm4_document(test), indent=4))
        (results / f"{node}.rc").write_text(str(rc))


@pytest.fixture
def fake_srun(tmp_path) -> Path:
    """A directory with an `srun` that runs its command as if on the node `-w` names."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "node = args[args.index('-w') + 1]\n"
        "while args[0].startswith('-'):\n"
        "    args = args[2:] if args[0] in ('-w', '-N', '-n') else args[1:]\n"
        "os.environ['SLURMD_NODENAME'] = node\n"
        "os.execvp(args[0], args)\n"
    )
    srun.chmod(0o755)
    return bin_dir


def test_the_dcgm_driver_fails_the_node_whose_diagnostic_failed(fake_srun, fake_dcgmi):
    dcgmi, results = fake_dcgmi
    dcgmi_results(results, {"gpu-b"}, ["gpu-a", "gpu-b"])
    proc = run_script(
        DCGM_SCRIPT,
        "--nodes",
        "gpu-a,gpu-b",
        "--dcgmi",
        str(dcgmi),
        env={"PATH": f"{fake_srun}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 1, proc.stderr
    lines = health_lines(proc.stdout)
    assert lines[0] == "VIGIL-HEALTH gpu-a PASS dcgmi diag: 1 passed"
    assert lines[1].startswith(
        "VIGIL-HEALTH gpu-b FAIL dcgmi diag: diagnostic (GPU 3: GPU 3 Error using CUDA API"
    )
    assert len(lines) == 2


def test_the_dcgm_driver_fails_a_node_where_dcgmi_cannot_run(fake_srun, tmp_path):
    proc = run_script(
        DCGM_SCRIPT,
        "--nodes",
        "gpu-a",
        "--dcgmi",
        str(tmp_path / "no-such-dcgmi"),
        env={"PATH": f"{fake_srun}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 1
    [line] = health_lines(proc.stdout)
    assert line.startswith("VIGIL-HEALTH gpu-a FAIL dcgmi diag printed no JSON result")


# --- both checks on a real Slurm, submitted as the recovery app submits them ----------------------

NODES = ["n1", "n2", "n3"]


@pytest.fixture(scope="module")
def slurm_nodes() -> Iterator[SlurmCluster]:
    reason = slurm_missing_reason()
    if reason:
        missing("slurm", reason)
    root = Path(tempfile.mkdtemp(prefix="vigil-hc-"))  # short: slurmd's unix sockets
    cluster = SlurmCluster(root, nodes=NODES)
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


def submit_check(cluster: SlurmCluster, tmp_path: Path, script: Path, *args: str):
    """The check as the recovery app submits it; (sbatch's exit status, the job's output)."""
    out = tmp_path / "check.out"
    proc = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--parsable",
            "-N",
            str(len(cluster.nodes)),
            "-w",
            ",".join(cluster.nodes),
            "--exclusive",
            "-o",
            str(out),
            str(script),
            *args,
        ],
        env=cluster.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return proc, out.read_text() if out.exists() else ""


def test_the_pairwise_check_in_a_real_allocation_fails_exactly_the_bad_node(slurm_nodes, tmp_path):
    bad = tmp_path / "bad-nodes"
    bad.write_text("n2\n")
    task = tmp_path / "fake-nccl-task"
    # Each task of the pair's step runs on one node; the bad node's task fails, as a rank on
    # a broken GPU would, and srun reports the step failed.
    task.write_text(f'#!/bin/sh\ngrep -qx "$SLURMD_NODENAME" {bad} && exit 1\nexit 0\n')
    task.chmod(0o755)
    proc, output = submit_check(
        slurm_nodes,
        tmp_path,
        NCCL_SCRIPT,
        "--pair-cmd",
        f"srun -N{{num_nodes}} -w {{nodes}} --ntasks-per-node=1 {task}",
    )
    assert proc.returncode == 1, (proc.stderr, output)
    lines = health_lines(output)
    assert lines[0] == "VIGIL-HEALTH n1 PASS passed with n3"
    assert lines[1].startswith("VIGIL-HEALTH n2 FAIL failed alone: exit 1: srun: error: n2: task 0")
    assert lines[2] == "VIGIL-HEALTH n3 PASS passed with n1"
    assert len(lines) == 3


def test_the_dcgm_check_in_a_real_allocation_fails_the_node_whose_gpu_failed(
    slurm_nodes, tmp_path, fake_dcgmi
):
    dcgmi, results = fake_dcgmi
    dcgmi_results(results, {"n3"}, NODES)
    proc, output = submit_check(slurm_nodes, tmp_path, DCGM_SCRIPT, "--dcgmi", str(dcgmi))
    assert proc.returncode == 1, (proc.stderr, output)
    lines = health_lines(output)
    assert lines[:2] == [
        "VIGIL-HEALTH n1 PASS dcgmi diag: 1 passed",
        "VIGIL-HEALTH n2 PASS dcgmi diag: 1 passed",
    ]
    assert lines[2].startswith("VIGIL-HEALTH n3 FAIL dcgmi diag: diagnostic (GPU 3: GPU 3 Error")
    assert len(lines) == 3
