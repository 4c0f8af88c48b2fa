"""`python -m collectors` as an operator runs it: flags, exit codes, output, real delivery."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from collectors.schema import parse_batch, parse_job_events, parse_node_events
from tests.collectors.helpers import TOKEN, collector
from tests.helpers import ROOT, wait_for


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--interval", "0"], "--interval: '0' must be a positive number"),
        (["--source", "gpu"], "argument --source: invalid choice"),
        (["--stdout", "--count", "x"], "--count: 'x' is not an integer"),
        (["--stdout"], "--source nvml needs --cluster"),
        (["--broker", "redis://x", "--cluster", "c", "--token", "short"], "shorter than 16"),
        (["--cluster", "c", "--token", TOKEN], "no broker"),
        (["--source", "dcgm", "--fixture", "a100-sxm4-80gb", "--stdout"], "--fixture only"),
        (["--stdout", "--cluster", "bad name!"], "--cluster 'bad name!'"),
        (["--source", "simulated", "--broker", "redis://x", "--token-file", "/nope.json"], "nope"),
        (["--source", "none", "--stdout", "--cluster", "c"], "--source none collects nothing"),
        (["--jobs", "simulated", "--stdout", "--cluster", "c"], "--jobs simulated only"),
        (["--source", "simulated", "--jobs", "slurm", "--stdout"], "--jobs slurm watches"),
        (["--source", "simulated", "--stdout", "--kernel-log", "kmsg"], "--kernel-log does not"),
        (["--stdout", "--cluster", "c", "--job-log-glob", "jobs/*.log"], "absolute path pattern"),
        (["--stdout", "--cluster", "c", "--job-log-min-uid", "-1"], "'-1' is not a uid"),
        (["--stdout", "--cluster", "c", "--history-minutes", "5"], "--history-minutes only"),
        (["--source", "simulated", "--stdout", "--history-minutes", "5", "--count", "2"], "not go"),
        (["--stdout", "--cluster", "c", "--intervals-per-batch", "721"], "at most 720 per batch"),
        (["--source", "simulated", "--stdout", "--gpus-per-node", "65"], "at most 64 GPUs"),
    ],
)
def test_bad_flags_give_one_clear_line_and_exit_2(args, says):
    result = collector(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--stdout", "--cluster", "c", "--dcgm-url", "http://x"], "--dcgm-url only applies"),
        (["--source", "simulated", "--stdout", "--job-logs-slurm"], "do not apply to --source"),
        (["--source", "simulated", "--stdout", "--clusters", " , "], "--clusters: give at least"),
        (["--stdout", "--cluster", "c", "--node", "a:b"], "--node 'a:b'"),
        (["--stdout", "--cluster", "c", "--fixture", "/no/such.yaml"], "--fixture /no/such.yaml"),
    ],
)
def test_every_other_flag_check_names_its_flag_in_one_line(args, says):
    result = collector(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert says in result.stderr


def test_an_unusable_spool_dir_is_refused_before_any_gpu_is_read(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    result = collector(
        "--fixture", "a100-sxm4-80gb", "--cluster", "c", "--token", TOKEN, "--count", "1",
        "--broker", "redis://127.0.0.1:1/0", "--spool-dir", str(not_a_dir / "spool"),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"vigil-collector: error: --spool-dir {not_a_dir / 'spool'}: Not a directory"
    )  # one line: no NVML log line either, the backend never started


def test_missing_node_in_token_file_is_named(tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"seren-node-001": TOKEN}))
    result = collector(
        "--source", "simulated", "--clusters", "seren", "--nodes-per-cluster", "2",
        "--token-file", str(tokens), "--broker", "redis+socket:///nowhere",
    )  # fmt: skip
    assert result.returncode == 2
    assert "no token for node seren-node-002" in result.stderr


@pytest.mark.skipif(
    __import__("ctypes.util").util.find_library("nvidia-ml") is not None,
    reason="this host has an NVIDIA driver",
)
def test_no_driver_means_collector_disabled_without_traceback():
    result = collector("--cluster", "seren", "--stdout", "--count", "1")
    assert result.returncode == 3
    assert result.stderr.strip() == (
        "vigil-collector: collector disabled: no NVIDIA driver (libnvidia-ml.so.1 not found)"
    )
    assert "Traceback" not in result.stderr


def test_stdout_prints_one_valid_batch_per_round_from_a_fixture():
    result = collector(
        "--source", "nvml", "--fixture", "a100-sxm4-80gb", "--cluster", "seren",
        "--node", "gpu-node-01", "--token", TOKEN, "--stdout", "--count", "4",
        "--interval", "0.05",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    batches = [parse_batch(line) for line in lines if '"gpu_events":' not in line]
    assert len(batches) == 4
    assert [len(b.samples) for b in batches] == [8, 8, 8, 7]  # GPU 7 lost at step 3
    assert batches[0].node == "gpu-node-01" and batches[0].token == TOKEN
    assert "GPU 7" in result.stderr and "lost" in result.stderr
    # The lost GPU is also a node event (its rows stop), sent once.
    events = [parse_node_events(line) for line in lines if '"gpu_events":' in line]
    lost = [e for b in events for e in b.gpu_events if e.kind == "gpu_lost"]
    assert [(e.gpu_index, e.source) for e in lost] == [(7, "counter")]


def test_ready_file_is_written_only_after_the_history_was_handed_over(tmp_path):
    ready, out = tmp_path / "ready", tmp_path / "out.jsonl"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "collectors", "--source", "simulated", "--clusters", "c",
                "--nodes-per-cluster", "1", "--gpus-per-node", "2", "--stdout", "--seed", "1",
                "--history-minutes", "3", "--interval", "60", "--ready-file", str(ready),
            ],
            cwd=ROOT, stdout=stdout, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_for(ready.exists, timeout=30)
            # Everything printed by then is history: three minutes of 30-second rounds.
            batches = [
                parse_batch(line) for line in out.read_text().splitlines() if '"samples"' in line
            ]
            stamps = {row[1] for b in batches for row in b.samples}
            assert len(stamps) >= 6
            assert max(stamps) - min(stamps) >= 120
        finally:
            proc.terminate()
            proc.wait(20)


def test_stdout_shows_scripted_xids_kernel_lines_and_job_windows_as_node_events(tmp_path):
    kern = tmp_path / "kern.log"
    kern.write_text("NVRM: Xid (PCI:0000:5d:00): 48, pid=1, name=python, old news\n")
    job_log = tmp_path / "jobs" / "31337" / "rank0.log"
    job_log.parent.mkdir(parents=True)
    job_log.write_text(
        "step 1\nTraceback (most recent call last):\nNameError: name 'x' is not defined\n"
    )
    result = collector(
        "--source", "nvml", "--fixture", "h100-xid79", "--cluster", "seren",
        "--node", "gpu-node-01", "--token", TOKEN, "--stdout", "--count", "4",
        "--interval", "0.05", "--kernel-log", str(kern), "--state-dir", str(tmp_path / "state"),
        "--job-log-glob", str(tmp_path / "jobs/*/*.log"), "--job-log-min-uid", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    events = [
        parse_node_events(line) for line in result.stdout.splitlines() if '"gpu_events":' in line
    ]
    xids = [(e.source, e.gpu_index, e.xid) for b in events for e in b.gpu_events if e.kind == "xid"]
    assert xids == [("nvml", 3, 79)]  # the kernel log's old line is not shipped
    lost = [(e.source, e.gpu_index) for b in events for e in b.gpu_events if e.kind == "gpu_lost"]
    assert lost == [("counter", 3)]  # its rows stop from step 3
    (window,) = [w for b in events for w in b.log_windows]
    assert window.job_id == "31337" and window.lines[-1] == "NameError: name 'x' is not defined"
    assert "node-event batches" in result.stderr


def test_simulated_count_mode_backfills_in_the_past_and_groups_rounds(tmp_path):
    tokens = tmp_path / "tokens.json"
    names = [f"{c}-node-{n:03d}" for c in ("sable", "kestrel") for n in (1, 2)]
    tokens.write_text(json.dumps({name: f"token-{name}-0123456789" for name in names}))
    before = time.time()
    result = collector(
        "--source", "simulated", "--nodes-per-cluster", "2", "--gpus-per-node", "4",
        "--token-file", str(tokens), "--stdout", "--count", "30", "--interval", "10",
        "--intervals-per-batch", "6",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # Job-event batches share stdout with telemetry (the simulator runs jobs by default).
    job_batches = [parse_job_events(line) for line in lines if '"events":' in line]
    node_events = [parse_node_events(line) for line in lines if '"gpu_events":' in line]
    batches = [parse_batch(line) for line in lines if '"samples":' in line]
    assert {b.node for b in node_events} <= set(names)
    assert job_batches and {b.node for b in job_batches} <= {"sable-node-001", "kestrel-node-001"}
    assert len(batches) == 4 * 5  # 4 nodes x 30 rounds / 6 per batch
    assert {b.token for b in batches} == {f"token-{n}-0123456789" for n in names}
    stamps = sorted(row[0] for b in batches for row in b.node_samples)
    assert stamps[-1] < time.time()  # all in the past: the server refuses the future
    assert stamps[0] == pytest.approx(before - 300, abs=5)
    assert all(len(b.samples) == 6 * 4 for b in batches)


@pytest.mark.integration
def test_agent_batches_reach_postgres_through_a_real_worker(committed_node_token, worker_factory):
    cluster, node, token = committed_node_token
    worker_factory()
    result = collector(
        "--source", "nvml", "--fixture", "h100-sxm5-80gb", "--cluster", cluster,
        "--node", node, "--token", token, "--count", "3", "--interval", "0.2",
        "--broker", settings.CELERY_BROKER_URL, "--spool-dir", str(ROOT / ".vigil" / "unused"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr

    def stored() -> tuple[int, int]:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM telemetry_gpusample")
            gpu_rows = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM telemetry_nodesample")
            return gpu_rows, cur.fetchone()[0]

    assert wait_for(lambda: stored() == (24, 3) and stored(), timeout=60) == (24, 3)
