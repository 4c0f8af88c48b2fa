"""A real Slurm cluster on this one host for tests (Debian slurm-wlm, no munge, fake GPUs).

The recipe is in reference/real-parts.md: `auth/none`, root as SlurmUser, everything under a
private temporary folder and private ports, eight empty files as `gpu` GRES, completed jobs
recorded by `jobcomp/filetxt` (no slurmdbd, so no `sacct`). Several tests on one machine may
each run their own cluster: ports are picked free, paths are private, and the daemons are
stopped by the pids they wrote, never by name.

Use it from a test module by importing a session fixture: `slurm_cluster` (one node named
after this host) or `slurm_two_nodes` (logical nodes `vn1` and `vn2`), or by hand:

    cluster = SlurmCluster(Path(tempfile.mkdtemp()), nodes=["n1", "n2"])
    cluster.start(); ...; cluster.stop()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from collectors.watchers.slurmtext import node_state_of
from tests.realparts import missing
from webapp.core.embedded import process_stop

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
GPUS = 8
# More CPUs than this machine has (SlurmdParameters=config_overrides): a test runs several
# jobs at once on a 2-core CI machine; the jobs only sleep.
CPUS = 16
# Generous: on a 2-core CI machine shared with a worker, PostgreSQL and Chromium, slurmctld
# and every slurmd start and register in a few seconds, but sometimes in many more.
START_TIMEOUT_S = 60.0


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
    """slurmctld + one slurmd per node on this host, `GPUS` fake GPUs each, under `root`.

    `nodes=None` is one node named after this host (short name), as a real single-host
    cluster has. Named `nodes` are logical nodes on this one host (real-parts.md: one
    `NodeName=.. NodeHostname=<host> Port=<p>` line and one `slurmd -N <name>` each), for
    tests that need a job on two nodes with one of them bad.
    """

    def __init__(
        self,
        root: Path,
        *,
        cluster_name: str = "vigiltest",
        nodes: Sequence[str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.cluster_name = cluster_name
        self.host = socket.gethostname().split(".")[0]
        self.nodes: list[str] = list(nodes) if nodes else [self.host]
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"nodes: a name is listed twice in {self.nodes}")
        self.node = self.nodes[0]
        self.conf = self.root / "slurm.conf"
        self.jobcomp = self.root / "jobcomp.txt"
        self.workdir = self.root / "work"  # where batch jobs write their output
        self.ctld_port = _free_port()
        self.slurmd_ports = {name: _free_port() for name in self.nodes}

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client tools (and the watcher) talking to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _pidfile(self, daemon: str) -> Path:
        """The pid file of `slurmctld` or of the slurmd of node `daemon`."""
        run = self.root / "run"
        return run / "slurmctld.pid" if daemon == "slurmctld" else run / f"slurmd.{daemon}.pid"

    def write_config(self) -> None:
        r = self.root
        for sub in ("state", "log", "run", "gpus", "work"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        for name in self.nodes:
            (r / f"spool{name}").mkdir(exist_ok=True)
        for i in range(GPUS):
            (r / "gpus" / f"fakegpu{i}").touch()
        node_lines = [
            # NodeHostname: every slurmd runs here; Port: each listens on its own.
            f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 "
            f"Port={self.slurmd_ports[name]} CPUs={CPUS} RealMemory=4096 Gres=gpu:{GPUS} "
            "State=UNKNOWN"
            for name in self.nodes
        ]
        self.conf.write_text(
            "\n".join(
                [
                    f"ClusterName={self.cluster_name}",
                    f"SlurmctldHost={self.host}(127.0.0.1)",
                    f"SlurmctldPort={self.ctld_port}",
                    f"SlurmdPort={self.slurmd_ports[self.node]}",
                    "AuthType=auth/none",
                    "CredType=cred/none",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={r / 'state'}",
                    # %n: the node name, so each logical node has its own spool, pid and log.
                    f"SlurmdSpoolDir={r}/spool%n",
                    f"SlurmctldPidFile={self._pidfile('slurmctld')}",
                    f"SlurmdPidFile={r / 'run'}/slurmd.%n.pid",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log'}/slurmd.%n.log",
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
                    *node_lines,
                    f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES "
                    "MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        gpus = f"{r / 'gpus'}/fakegpu[0-{GPUS - 1}]"
        (r / "gres.conf").write_text(
            "AutoDetect=off\n"
            + "".join(f"NodeName={name} Name=gpu File={gpus}\n" for name in self.nodes)
        )

    def start(self) -> None:
        self.write_config()
        try:
            self._daemon_start("slurmctld", [SLURMCTLD])
            for name in self.nodes:
                self._daemon_start(name, [SLURMD, "-N", name])
            self.wait_idle()
        except BaseException:
            self.stop()
            raise

    def _daemon_start(self, daemon: str, argv: list[str]) -> None:
        """Run a daemon (it forks into the background) and wait for its pid file."""
        proc = subprocess.run(argv, env=self.env, timeout=START_TIMEOUT_S, capture_output=True)
        if proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}; "
                f"logs in {self.root / 'log'}"
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while self._pid(daemon) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{daemon} wrote no pid file; see {self.root / 'log'}")
            time.sleep(0.05)

    def _pid(self, daemon: str) -> int | None:
        try:
            return int(self._pidfile(daemon).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def run(self, *args: str, check: bool = True) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        proc = subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def node_state(self, node: str | None = None) -> str:
        """What `sinfo %T` says of the node (the first one by default): `idle`, `drained`..."""
        node = node or self.node
        return self.run("sinfo", "-h", "-n", node, "-o", "%T", check=False).strip()

    def drain_reason(self, node: str) -> str:
        """The reason Slurm gives for the node being drained or down; "" when it has none."""
        reason = self.run("sinfo", "-h", "-n", node, "-o", "%E", check=False).strip()
        return "" if reason == "none" else reason

    def wait_idle(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every node is idle (registered, no job, not drained)."""
        self._wait_nodes(lambda state: state == "idle", "idle", timeout)

    def _wait_nodes(self, ok: Callable[[str], bool], wanted: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {name: self.node_state(name) for name in self.nodes}
            if all(ok(state) for state in states.values()):
                return
            time.sleep(0.2)
        raise AssertionError(
            f"nodes not {wanted} after {timeout:.0f} s (states {states}); "
            f"logs in {self.root / 'log'}"
        )

    def sbatch(self, *args: str) -> str:
        """Submit a batch job; its job id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.workdir}", "-o", "%j.out", *args)
        return out.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()

    def cancel_all(self, timeout: float = START_TIMEOUT_S) -> None:
        """Cancel every job and wait until none is pending, running or completing, so one
        test's jobs do not hold the nodes of the next."""
        jobs = self.run("squeue", "-h", "-o", "%i").split()
        if jobs:
            self.run("scancel", *jobs, check=False)  # some may have ended meanwhile
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-o", "%i").split():
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs still queued after scancel: {self.run('squeue')}")
            time.sleep(0.2)

    def resume_all(self, timeout: float = START_TIMEOUT_S) -> None:
        """Return every drained, draining or down node to service (`State=RESUME`) and wait
        until none of them is any more."""
        for name in self.nodes:
            if _out_of_service(self.node_state(name)):
                self.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
        self._wait_nodes(lambda state: not _out_of_service(state), "in service", timeout)

    def stop(self) -> None:
        """Stop every daemon by the pid in its pid file (never by name: other clusters of
        other tests may run on this host). All are told at once, then waited for: each takes
        seconds to shut down, and one after another they add up at every session's end."""
        pids = {d: self._pid(d) for d in [*self.nodes, "slurmctld"]}
        for pid in pids.values():
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        for daemon, pid in pids.items():
            if pid is not None:
                process_stop(pid)
                self._pidfile(daemon).unlink(missing_ok=True)


def _out_of_service(state: str) -> bool:
    """Whether a `sinfo %T` state is anything but up: draining, drained, down, not responding
    (`*`), or not known yet (the watcher's own mapping decides)."""
    return node_state_of(state) != "up"


def _cluster(prefix: str, **kwargs: Any) -> Iterator[SlurmCluster]:
    reason = slurm_missing_reason()
    if reason:
        missing("slurm", reason)
    # Short path: slurmd puts unix sockets (108-byte limit) in its spool folder.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = SlurmCluster(root, **kwargs)
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running single-node Slurm with 8 fake GPUs; skipped where slurm-wlm is absent."""
    yield from _cluster("vigil-slurm-")


@pytest.fixture(scope="session")
def slurm_two_nodes() -> Iterator[SlurmCluster]:
    """A running Slurm of two logical nodes, `vn1` and `vn2`, 8 fake GPUs each; its own
    folder, ports and daemons (independent of `slurm_cluster`). It is shared by the session:
    a test that drains a node or leaves jobs behind calls `cancel_all()` and `resume_all()`
    when it is done."""
    yield from _cluster("vigil-slurm2-", cluster_name="vigiltwo", nodes=("vn1", "vn2"))
