"""Alert latency: a failing line written on a node -> the email in the SMTP server's inbox.

    .venv/bin/python bench/alert_latency.py [--runs 10] [--interval 0.5]

Starts its own embedded PostgreSQL and Redis in a temporary folder, migrates, registers a
node, then starts real parts: an aiosmtpd SMTP server in this process, a Celery worker
(ingest and default queues, EMAIL_URL pointing at the SMTP server) and the node agent
(fake NVML fixture, no NVML Xid events, `--kernel-log FILE`, one round per --interval s). An
operator with an email address gets hardware alerts.

Each run appends an Xid 79 line ("GPU has fallen off the bus") to the kernel log file and
waits for the email. The path it measures: the agent reads the line in its next round and
publishes a node-event batch -> ingest stores the GPU error and opens a gpu_error failure ->
diagnosis (failure_diagnosed) -> the alerts task raises the alert -> its group's flush after
group_wait (1 s) -> the send task delivers over SMTP. Between runs the previous incident is
removed (failure events and alert groups of the bench's cluster), so each run is a new
incident: Vigil folds Xids of one node within 3 minutes into one failure
(failures/evidence.py BURST_SILENCE), and a group already notified waits group_interval.

Last line: JSON with median_s, p95_s, runs (and each run's seconds). Goal: p95 under 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site, p95  # noqa: E402 (after the path)

CLUSTER = "bench"
NODE = "gpu-node-01"
FIXTURE = "h100-sxm5-80gb"
# The fixture's GPU 0 (collectors/fixtures/h100-sxm5-80gb.yaml), as the kernel writes it.
XID_LINE = "NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=python, GPU has fallen off the bus."


class Inbox:
    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.arrivals.append(time.time())
        return "250 Message accepted for delivery"

    def count(self) -> int:
        with self.lock:
            return len(self.arrivals)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.5, help="agent round (s)")
    parser.add_argument("--timeout", type=float, default=60, help="per run (s)")
    args = parser.parse_args()

    with bench_site(unset=("EMAIL_URL",)) as tmp:
        from aiosmtpd.controller import Controller
        from django.conf import settings
        from django.contrib.auth.models import Group, User

        from tests.helpers import WorkerProcess
        from webapp.alerts.models import AlertGroup
        from webapp.failures.models import FailureEvent
        from webapp.fleet import services as fleet_services
        from webapp.fleet.models import Node
        from webapp.teams.selectors import OPERATORS_GROUP

        inbox = Inbox()
        port = _free_port()
        smtp = Controller(inbox, hostname="127.0.0.1", port=port)
        agent = None
        worker = None
        try:
            smtp.start()
            token = fleet_services.node_token_issue(CLUSTER, NODE)
            operator = User.objects.create_user("operator", email="operator@example.org")
            operator.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
            worker = WorkerProcess(
                os.environ["DATABASE_URL"],
                Path(tmp) / "worker.log",
                concurrency=2,
                visibility_timeout_s=600,
                env={"EMAIL_URL": f"smtp://127.0.0.1:{port}"},
            )
            worker.start()
            kernel_log = Path(tmp) / "kern.log"
            kernel_log.write_text("")
            agent_log = open(Path(tmp) / "agent.log", "ab")  # noqa: SIM115 (closed below)
            agent = subprocess.Popen(
                [
                    sys.executable, "-m", "collectors", "--source", "nvml", "--fixture", FIXTURE,
                    "--no-xid", "--jobs", "none", "--cluster", CLUSTER, "--node", NODE,
                    "--token", token, "--broker", settings.CELERY_BROKER_URL,
                    "--interval", str(args.interval), "--kernel-log", str(kernel_log),
                    "--state-dir", str(Path(tmp) / "agent-state"),
                    "--spool-dir", str(Path(tmp) / "agent-spool"),
                ],
                cwd=ROOT,
                stdout=agent_log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            deadline = time.monotonic() + 60
            while not Node.objects.filter(hostname=NODE, last_seen__isnull=False).exists():
                if time.monotonic() > deadline or agent.poll() is not None:
                    raise SystemExit("the agent's samples never arrived; see agent.log")
                time.sleep(0.2)

            latencies: list[float] = []
            for run in range(args.runs):
                FailureEvent.objects.filter(cluster__name=CLUSTER).delete()
                AlertGroup.objects.all().delete()
                before = inbox.count()
                time.sleep(args.interval * 2)  # the deletes settle; the next round starts clean
                with kernel_log.open("a") as f:
                    f.write(XID_LINE + "\n")
                    f.flush()
                    written = time.time()
                deadline = time.monotonic() + args.timeout
                while inbox.count() == before:
                    if time.monotonic() > deadline:
                        raise SystemExit(
                            f"run {run}: no email within {args.timeout} s; worker log:\n"
                            f"{worker.log()[-3000:]}"
                        )
                    time.sleep(0.01)
                latency = inbox.arrivals[before] - written
                latencies.append(latency)
                print(f"run {run}: {latency:.2f} s", file=sys.stderr)
            result = {
                "median_s": round(statistics.median(latencies), 3),
                "p95_s": round(p95(latencies), 3),
                "runs": len(latencies),
                "max_s": round(max(latencies), 3),
                "latencies_s": [round(x, 3) for x in latencies],
                "agent_interval_s": args.interval,
                "cpus": os.cpu_count(),
            }
            print(json.dumps(result))
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(20)
            if worker is not None:
                worker.stop()
            smtp.stop()


if __name__ == "__main__":
    main()
