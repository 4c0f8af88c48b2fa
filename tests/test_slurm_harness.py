"""tests/slurm.py's two-node Slurm: a job spans both logical nodes, one can be drained (its
reason shown by `sinfo -R`) while the other still runs jobs, and the helpers that keep one
test's jobs and drains from leaking into the next put it back."""

from __future__ import annotations

import pytest

from tests.helpers import wait_for
from tests.slurm import slurm_two_nodes  # noqa: F401 (the session fixture)

pytestmark = pytest.mark.integration


def test_two_logical_nodes_with_eight_gpus_each(slurm_two_nodes):  # noqa: F811
    cluster = slurm_two_nodes
    assert cluster.nodes == ["vn1", "vn2"] and cluster.node == "vn1"
    gres = cluster.run("sinfo", "-N", "-h", "-o", "%N %G").split("\n")
    assert sorted(line.strip() for line in gres if line.strip()) == ["vn1 gpu:8", "vn2 gpu:8"]
    # One job step on each node (both slurmd run on this host, so `hostname` prints it twice).
    out = cluster.run("srun", "-N2", "--gres=gpu:1", "printenv", "SLURMD_NODENAME")
    assert sorted(out.split()) == ["vn1", "vn2"]


def test_a_drained_node_shows_its_reason_and_resume_returns_it(slurm_two_nodes):  # noqa: F811
    cluster = slurm_two_nodes
    reason = "vigil: gpu_off_bus failure 123"
    try:
        cluster.run("scontrol", "update", "NodeName=vn2", "State=DRAIN", f"Reason={reason}")
        assert cluster.node_state("vn2") == "drained"
        assert cluster.drain_reason("vn2") == reason
        assert cluster.drain_reason("vn1") == ""
        listed = cluster.run("sinfo", "-R", "-h", "-o", "%E|%N")
        assert f"{reason}|vn2" in listed.splitlines()
        # The other node still runs jobs; a job that needs both waits, and squeue says why.
        assert cluster.run("srun", "-w", "vn1", "printenv", "SLURMD_NODENAME").strip() == "vn1"
        job = cluster.sbatch("-N2", "--wrap", "sleep 1")
        wait_for(lambda: "DRAINED" in cluster.run("squeue", "-h", "-j", job, "-o", "%r"))
        assert cluster.job_state(job) == "PENDING"
    finally:
        cluster.cancel_all()
        cluster.resume_all()

    assert [cluster.node_state(n) for n in cluster.nodes] == ["idle", "idle"]
    assert cluster.drain_reason("vn2") == ""
    assert cluster.run("sinfo", "-R", "-h").strip() == ""


def test_cancel_all_frees_both_nodes(slurm_two_nodes):  # noqa: F811
    cluster = slurm_two_nodes
    jobs = [cluster.sbatch("-N2", "--gres=gpu:8", "--wrap", "sleep 300") for _ in range(2)]
    try:
        assert sorted(cluster.run("squeue", "-h", "-o", "%i").split()) == sorted(jobs)
    finally:
        cluster.cancel_all()
    assert cluster.run("squeue", "-h").strip() == ""
    cluster.wait_idle()  # both free again: the next test finds an empty cluster
