"""A real single-host Slurm cluster for tests (Debian slurm-wlm, no munge, fake GPUs).

The recipe is in reference/real-parts.md: `auth/none`, root as SlurmUser, everything under a
private temporary folder and private ports, eight empty files as `gpu` GRES, completed jobs
recorded by `jobcomp/filetxt` (no slurmdbd, so no `sacct`). Several tests on one machine may
each run their own cluster: ports are picked free, paths are private, and the daemons are
stopped by the pids they wrote, never by name.

Use it from a test module with `pytest_plugins = ["tests.slurm"]` (the `slurm_cluster`
fixture is session-scoped), or by hand:

    cluster = SlurmCluster(Path(tempfile.mkdtemp())); cluster.start(); ...; cluster.stop()
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realparts import missing
from webapp.core.embedded import process_stop

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
GPUS = 8
# More CPUs than this machine has (SlurmdParameters=config_overrides): a test runs several
# jobs at once on a 2-core CI machine; the jobs only sleep.
CPUS = 16
START_TIMEOUT_S = 30.0


def slurm_missing_reason() -> str | None:
    """Why a real Slurm cannot run here, or None when it can."""
    for path in (SLURMCTLD, SLURMD):
        if not os.path.exists(path):
            return f"{path} not found: install Debian's slurm-wlm (make test-deps, as root)"
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} not found: install Debian's slurm-wlm (make test-deps, as root)"
    if os.geteuid() != 0:
        return "the test Slurm runs its daemons as root (SlurmUser=root, auth/none)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """slurmctld + slurmd on this host, with `GPUS` fake GPUs, configured under `root`."""

    def __init__(self, root: Path, *, cluster_name: str = "vigiltest") -> None:
        self.root = Path(root)
        self.cluster_name = cluster_name
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.jobcomp = self.root / "jobcomp.txt"
        self.workdir = self.root / "work"  # where batch jobs write their output
        self.ctld_port = _free_port()
        self.slurmd_port = _free_port()
        self._pids: dict[str, int] = {}

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client tools (and the watcher) talking to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        r = self.root
        for sub in ("state", "spool", "log", "run", "gpus", "work"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        for i in range(GPUS):
            (r / "gpus" / f"fakegpu{i}").touch()
        self.conf.write_text(
            "\n".join(
                [
                    f"ClusterName={self.cluster_name}",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={self.ctld_port}",
                    f"SlurmdPort={self.slurmd_port}",
                    "AuthType=auth/none",
                    "CredType=cred/none",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool'}",
                    f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "SlurmdParameters=config_overrides",
                    "SchedulerType=sched/backfill",
                    "MpiDefault=none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/filetxt",
                    f"JobCompLoc={self.jobcomp}",
                    "ReturnToService=2",
                    # Finished jobs leave squeue/scontrol after this many seconds; the watcher
                    # then reads them from the jobcomp file.
                    "MinJobAge=30",
                    "KillWait=2",
                    "InactiveLimit=0",
                    "GresTypes=gpu",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=4096 "
                    f"Gres=gpu:{GPUS} State=UNKNOWN",
                    f"PartitionName=gpu Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        (r / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.node} Name=gpu File={r / 'gpus'}/fakegpu[0-{GPUS - 1}]\n"
        )

    def start(self) -> None:
        self.write_config()
        for name, exe in (("slurmctld", SLURMCTLD), ("slurmd", SLURMD)):
            subprocess.run([exe], env=self.env, check=True, timeout=30, capture_output=True)
            self._pids[name] = self._read_pid(name)
        try:
            self.wait_idle()
        except BaseException:
            self.stop()
            raise

    def _read_pid(self, name: str) -> int:
        pidfile = self.root / "run" / f"{name}.pid"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                return int(pidfile.read_text().strip())
            except (FileNotFoundError, ValueError):
                time.sleep(0.05)
        raise AssertionError(f"{name} wrote no pid file; see {self.root / 'log'}")

    def run(self, *args: str, check: bool = True) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        proc = subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).strip()

    def wait_idle(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state()
            if state == "idle":
                return
            time.sleep(0.2)
        raise AssertionError(
            f"node {self.node} not idle after {timeout:.0f} s (state {state!r}); "
            f"logs in {self.root / 'log'}"
        )

    def sbatch(self, *args: str) -> str:
        """Submit a batch job; its job id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.workdir}", "-o", "%j.out", *args)
        return out.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld"):
            pid = self._pids.pop(name, None)
            if pid is not None:
                process_stop(pid)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running single-node Slurm with 8 fake GPUs; skipped where slurm-wlm is absent."""
    reason = slurm_missing_reason()
    if reason:
        missing("slurm", reason)
    # Short path: slurmd puts unix sockets (108-byte limit) in its spool folder.
    root = Path(tempfile.mkdtemp(prefix="vigil-slurm-"))
    cluster = SlurmCluster(root)
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)
