"""`diagnose LOGFILE [--kernel-log FILE] [--json]`: the CLI, and manage.py with no database."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from webapp.failures import cli

ROOT = Path(__file__).resolve().parent.parent.parent
CORPUS = ROOT / "tests" / "data" / "failure_logs"
KEYS = {"cause", "category", "action", "blamed_node", "confidence", "evidence", "rule_id"}


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    parser = __import__("argparse").ArgumentParser()
    cli.add_arguments(parser)
    status = cli.run(vars(parser.parse_args(list(argv))), out, err)
    return status, out.getvalue(), err.getvalue()


def test_json_is_exactly_one_object_with_the_keys(tmp_path):
    kernel = tmp_path / "kern.log"
    kernel.write_text("node-05 kernel: NVRM: Xid (PCI:0000:1a:00): 48, pid=1, DBE\n")
    status, out, _ = _run(str(CORPUS / "nccl_timeout_3.log"), "--kernel-log", str(kernel), "--json")
    assert status == 0
    data = json.loads(out)  # one object, nothing else on stdout
    assert set(data) >= KEYS
    assert (data["cause"], data["blamed_node"]) == ("gpu_ecc", "node-05")
    assert out.count("\n") == 1


def test_text_output_names_cause_and_evidence():
    status, out, _ = _run(str(CORPUS / "host_oom_1.log"))
    assert status == 0
    assert "host_oom" in out and "evidence:" in out


def test_unreadable_file_is_one_line_and_nonzero(tmp_path):
    status, out, err = _run(str(tmp_path / "missing.log"), "--json")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "missing.log" in err


def test_manage_py_diagnose_needs_no_database_or_broker(tmp_path):
    """manage.py in a bare environment (no DATABASE_URL, no broker, nothing running): it must
    diagnose without starting the embedded servers."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "VIGIL_DATA_DIR": str(tmp_path / "data"),
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "diagnose", str(CORPUS / "gpu_off_bus_1.log"), "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["cause"], data["blamed_node"]) == ("gpu_off_bus", "node-03")
    assert not (tmp_path / "data" / "pg").exists()  # no embedded PostgreSQL was started
    assert not (tmp_path / "data" / "redis").exists()  # nor Redis


def test_an_operators_combined_capture_still_counts_its_kernel_lines(tmp_path):
    """Offline, the operator hands over the file: an Xid line inside it is kernel evidence
    (the live path ignores the same text inside a job's own log: test_services.py)."""
    capture = tmp_path / "job-900.out"
    capture.write_text(
        "gpu-node-02 kernel: NVRM: Xid (PCI:0000:23:00): 79, pid=48213, GPU has fallen off the "
        "bus.\n"
        "srun: error: gpu-node-02: task 0: Exited with exit code 1\n"
    )
    status, out, _ = _run(str(capture), "--json")
    assert status == 0
    data = json.loads(out)
    assert (data["cause"], data["category"], data["blamed_node"]) == (
        "gpu_off_bus",
        "infrastructure",
        "gpu-node-02",
    )


# A job on gpu-a-001 prints an NCCL line with another host's "host:pid:tid" prefix.
FOREIGN_IB = (
    "victim-node-77:81234:81301 [2] transport/net_ib.cc:1712 NCCL WARN NET/IB : Got completion"
    " from peer 10.20.1.17<59412> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
)


def _manage_diagnose(tmp_path: Path, *argv: str) -> dict:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "VIGIL_DATA_DIR": str(tmp_path / "data"),
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "diagnose", *argv, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_host_named_by_the_jobs_output_outside_its_nodes_is_never_blamed(tmp_path):
    log = tmp_path / "job-77.out"
    log.write_text("step 10 loss 2.01\n" + FOREIGN_IB)
    # The job's one node printed the line: the cause stands, blamed on that node.
    data = _manage_diagnose(tmp_path, str(log), "--nodes", "gpu-a-001")
    assert (data["cause"], data["blamed_node"]) == ("ib_link", "gpu-a-001")
    assert data["blame_evidence"] == "job_log"
    # Two nodes, and nothing says which printed the line: nobody is blamed.
    data = _manage_diagnose(tmp_path, str(log), "--nodes", "gpu-a-001,gpu-a-002")
    assert (data["cause"], data["blamed_node"], data["blame_evidence"]) == ("ib_link", None, "")
    # srun --label tags the line with task 1, which srun places on gpu-a-002.
    labelled = tmp_path / "job-78.out"
    labelled.write_text(
        "1: " + FOREIGN_IB + "srun: error: gpu-a-002: task 1: Exited with exit code 1\n"
    )
    status, out, _ = _run(str(labelled), "--nodes", "gpu-a-001,gpu-a-002", "--json")
    assert status == 0
    assert json.loads(out)["blamed_node"] == "gpu-a-002"


def test_a_peer_outside_the_jobs_nodes_is_never_blamed(tmp_path):
    log = tmp_path / "job.out"
    log.write_text(
        "victim-node-77:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
        "gpu-a-001:100:150 [0] misc/socket.cc:518 NCCL WARN Net : Call to recv from"
        " 10.0.0.2<58355> failed : Connection reset by peer\n"
    )
    status, out, _ = _run(str(log), "--nodes", "gpu-a-001", "--json")
    data = json.loads(out)
    assert (data["cause"], data["blamed_node"]) == ("nccl_remote", None)
    # Without the job's nodes, the log's own map still names the peer (operator's reading).
    status, out, _ = _run(str(log), "--json")
    assert json.loads(out)["blamed_node"] == "victim-node-77"


def test_kernel_evidence_is_marked_as_the_node_agents(tmp_path):
    kernel = tmp_path / "kern.log"
    kernel.write_text("gpu-a-001 kernel: NVRM: Xid (PCI:0000:1a:00): 79, pid=1, fallen off\n")
    log = tmp_path / "job.out"
    log.write_text("[rank0]: RuntimeError: CUDA error: unspecified launch failure\n")
    status, out, _ = _run(str(log), "--kernel-log", str(kernel), "--nodes", "gpu-a-001", "--json")
    data = json.loads(out)
    assert (data["cause"], data["blamed_node"]) == ("gpu_off_bus", "gpu-a-001")
    assert data["blame_evidence"] == "node_agent"
