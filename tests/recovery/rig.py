"""A recovery rig on a real Slurm: the test Slurm's logical nodes known to Vigil, a node agent
on the first node (fake NVML fixture, a kernel log file, the jobs' log files, and the Slurm
watcher), a Celery worker for ingest and diagnosis and one on the cluster's recovery queue.

Used by tests/recovery/test_slurm.py and bench/recovery.py. The caller provides the database
(pytest's, or the bench's embedded one) and a SlurmCluster (tests/slurm.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from tests.factory import cluster_make
from tests.helpers import ROOT, WorkerProcess, wait_for
from tests.slurm import SlurmCluster
from webapp.fleet.models import Cluster
from webapp.recovery.actions import recovery_queue
from webapp.recovery.services import recovery_policy_set

CLUSTER = "rcv"
FIXTURE = "h100-sxm5-80gb"
# GPU 0 of the fixture is at 00000000:18:00.0; the kernel names it by domain:bus:device.
XID_LINE = "NVRM: Xid (PCI:{pci}): {xid}, pid=4242, name=python, GPU has fallen off the bus."
# The fixture's GPU 0 and GPU 1 (00000000:2A:00.0): one GPU's Xids within 3 min are one
# incident, so a second incident in one test names the other GPU.
GPU0, GPU1 = "0000:18:00", "0000:2a:00"
FAKE_HEALTHCHECK = Path(__file__).with_name("healthcheck_fake.sh")


class Rig:
    def __init__(self, slurm: SlurmCluster, tmp: Path, db_url: str) -> None:
        self.slurm = slurm
        self.tmp = Path(tmp)
        self.db_url = db_url
        self.kernel_log = self.tmp / "kern.log"
        self.kernel_log.touch()
        self.bad_nodes = self.tmp / "bad-nodes.txt"  # the fake health check's verdicts
        self.bad_nodes.touch()
        self.tokens: dict[str, str] = {}
        self.workers: list[WorkerProcess] = []
        self.agent: subprocess.Popen | None = None

    @property
    def agent_node(self) -> str:
        return self.slurm.nodes[0]

    def vigil(self, mode: str = "auto", max_auto_restarts: int | None = None) -> None:
        """The cluster's nodes known to Vigil; the first node's agent also watches Slurm."""
        made = cluster_make(CLUSTER, self.slurm.nodes, gpus=0, scheduler=self.agent_node)
        self.tokens.update(made.tokens)
        self.cluster_id = Cluster.objects.get(name=CLUSTER).pk
        self.policy(mode, max_auto_restarts)

    def policy(self, mode: str, max_auto_restarts: int | None = None) -> None:
        found = recovery_policy_set(self.cluster_id, mode=mode, executor="slurm", user="test")
        found.max_auto_restarts = max_auto_restarts
        # Two nodes, one of them held while a job starts (submit_on_agent_node): the share of
        # nodes out at once is not what these tests are about.
        found.max_out_percent = 100
        found.save(update_fields=["max_auto_restarts", "max_out_percent"])

    def worker_env(self, **extra: str) -> dict[str, str]:
        return {
            "SLURM_CONF": str(self.slurm.conf),
            "VIGIL_RECOVERY_WORKDIR": str(self.slurm.workdir),
            "VIGIL_HEALTHCHECK_SCRIPT": str(FAKE_HEALTHCHECK),
            "VIGIL_HEALTHCHECK_ARGS": str(self.bad_nodes),
            "VIGIL_HEALTHCHECK_TIMEOUT_S": "60",
            "VIGIL_RECOVERY_RETRY_BASE_S": "1",
            # The agent here sends every 0.5 s.
            "VIGIL_RECOVERY_SETTLE_S": "3",
            **extra,
        }

    def settings_apply(self, settings) -> None:
        """The workers' settings in this process too, for plans made here (a page's POST)."""
        settings.VIGIL_RECOVERY_WORKDIR = str(self.slurm.workdir)
        settings.VIGIL_HEALTHCHECK_SCRIPT = str(FAKE_HEALTHCHECK)
        settings.VIGIL_HEALTHCHECK_ARGS = str(self.bad_nodes)
        settings.VIGIL_HEALTHCHECK_TIMEOUT_S = 60

    def start_worker(self, queues: str, **env: str) -> WorkerProcess:
        name = queues.replace(",", "-").replace(".", "_")
        worker = WorkerProcess(
            self.db_url,
            self.tmp / f"worker-{name}-{len(self.workers)}.log",
            queues=queues,
            env=self.worker_env(**env),
        )
        worker.start()
        self.workers.append(worker)
        return worker

    def start(self, **recovery_env: str) -> None:
        """One worker for ingest and diagnosis, one on the recovery queue, and the agent."""
        self.start_worker("ingest,default")
        self.recovery_worker = self.start_worker(recovery_queue(CLUSTER), **recovery_env)
        self.start_agent()
        self.wait_agent_ready()

    def start_agent(self) -> None:
        node = self.agent_node
        self._agent_log = open(self.tmp / "agent.log", "ab")  # noqa: SIM115 (closed in stop)
        self.agent = subprocess.Popen(
            [
                sys.executable, "-m", "collectors", "--source", "nvml", "--fixture", FIXTURE,
                "--cluster", CLUSTER, "--node", node, "--token", self.tokens[node],
                "--broker", settings.CELERY_BROKER_URL,
                "--interval", "0.5", "--jobs", "slurm", "--jobs-interval", "0.5",
                "--kernel-log", str(self.kernel_log), "--job-logs-slurm",
                "--job-log-min-uid", "0",  # the test cluster's jobs run as root
                # The test Slurm runs every job as root (tests/slurm.py).
                "--job-log-min-uid", "0",
                "--state-dir", str(self.tmp / "agent-state"),
                "--spool-dir", str(self.tmp / "agent-spool"),
                "--ready-file", str(self.tmp / "agent.ready"),
            ],
            cwd=ROOT,
            env={**os.environ, "SLURM_CONF": str(self.slurm.conf)},
            stdout=self._agent_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def wait_agent_ready(self, timeout: float = 60) -> None:
        """Until the agent watches: a job that starts and ends before it does is never seen
        running, and its log never read (a 2-core CI machine takes seconds to start Python)."""
        ready = self.tmp / "agent.ready"
        wait_for(lambda: ready.exists() or self.agent.poll() is not None, timeout=timeout)
        if not ready.exists():
            raise AssertionError(f"the agent exited before it watched:\n{self.logs()}")

    def xid(self, xid: int = 79, pci: str = GPU0) -> float:
        """A GPU error line in the agent node's kernel log; when it was written."""
        at = time.time()
        with self.kernel_log.open("a") as f:
            f.write(XID_LINE.format(xid=xid, pci=pci) + "\n")
        return at

    def submit_on_agent_node(self, *args: str) -> str:
        """Submit a job that starts on the agent's node: the other nodes are held meanwhile."""
        others = [n for n in self.slurm.nodes if n != self.agent_node]
        for node in others:
            self.slurm.run(
                "scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=test: hold"
            )
        try:
            job = self.slurm.sbatch(*args)
            self.wait_running(job)
        finally:
            for node in others:
                self.slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        return job

    def job(self, job: str) -> dict[str, str]:
        out = self.slurm.run("scontrol", "show", "job", "-o", job, check=False)
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_running(self, job: str, *, restarts: int = 0, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job(job)
            if info.get("JobState") == "RUNNING" and int(info.get("Restarts", -1)) >= restarts:
                return info
            time.sleep(0.1)
        keys = ("JobState", "Reason", "Restarts", "NodeList", "ExcNodeList", "StartTime")
        raise AssertionError(f"job {job} not running again: {[(k, info.get(k)) for k in keys]}")

    def stop(self) -> None:
        # The agent and every worker told to stop first, then each waited for: their warm
        # shutdowns (a second or two each) overlap instead of adding up.
        agent = self.agent if self.agent and self.agent.poll() is None else None
        if agent:
            agent.terminate()
        for worker in self.workers:
            if worker.proc and worker.proc.poll() is None:
                os.killpg(worker.proc.pid, signal.SIGTERM)
        if agent:
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
        if getattr(self, "_agent_log", None):
            self._agent_log.close()
        for worker in self.workers:
            if worker.proc:
                try:
                    worker.proc.wait(20)
                except subprocess.TimeoutExpired:
                    worker.kill()
            worker.stop()  # closes its log
        self.slurm.cancel_all()
        self.slurm.resume_all()

    def logs(self) -> str:
        parts = [f"--- {w.logfile.name}\n{w.log()[-3000:]}" for w in self.workers]
        agent = self.tmp / "agent.log"
        if agent.exists():
            parts.append(f"--- agent\n{agent.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)
