"""`make demo`: the whole system on one machine, with a simulated cluster feeding it.

Starts (embedded PostgreSQL and Redis come from settings when no URL is configured), migrates,
creates the demo login, issues node tokens, then runs the web server, a Celery worker, beat
and the simulated collectors as child processes until Ctrl-C, which stops everything it
started. It drives the apps through their management commands only (core imports no app).

Start-up handshake: the live collector writes its `--ready-file` once the history it was
asked for has been handed to the broker (or at once without history); the demo waits for
that file, not for a line in a log.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from collectors.backends.siminbox import INBOX_ENV
from collectors.backends.simulated import DEFAULT_CLUSTERS, FIRST_FAULT_ENV, node_name
from webapp.core import embedded

DEMO_USER = "demo"
# The evaluation form's example checkpoint (webapp/evaluation/forms.py EXAMPLE_CHECKPOINT),
# made under the demo's model root so the example is one the page accepts.
EXAMPLE_CHECKPOINT = ("internlm-7b", "step-1000")
# The demo's evaluation plan: a 7B model in bf16 is about 14 GB (7e9 parameters x 2 bytes);
# the placeholder file is small, so the size is given.
EVAL_MODEL_SIZE_GB = 14
EVAL_DATASETS = 24  # the first of the default suite
# The demo's teams and the scheduler accounts each owns (the simulator's accounts: the
# users' teams and, for the others, their job type): alerts, silences and the pages' "Team"
# name these, the accounts stay the scheduler's.
DEMO_TEAMS = {
    "pretraining": "pretrain",
    "multimodal": "multimodal|mllm",
    "data": "data",
    "finetune-eval": "sft|eval|debug|other",
}
# The first live incident, a few minutes in: the workload's own hardware faults strike a
# pretraining run every few hours, and its pool jobs fail mostly on their own scripts (which
# Vigil reports, not restarts), so a demo would rarely see the loop close live; the history's
# failures are replayed, detected long after they happened, and only told
# (VIGIL_RECOVERY_ACT_WITHIN_S). 150 s after the
# start is a minute or two after the banner (the hour of history is sent first): time to open
# the pages.
FIRST_FAILURE_S = 150.0
# How long the demo tries to plan its evaluation while its nodes register their GPUs.
EVAL_PLAN_WAIT_S = 120


class Command(BaseCommand):
    help = "Run Vigil with a simulated GPU cluster: web UI, worker, beat and collectors."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--clusters", default=",".join(DEFAULT_CLUSTERS))
        parser.add_argument("--nodes-per-cluster", type=int, default=16)
        parser.add_argument("--gpus-per-node", type=int, default=8)
        parser.add_argument("--interval", type=float, default=5.0, help="seconds per sample")
        parser.add_argument(
            "--backfill-minutes",
            type=int,
            default=60,
            help="history to simulate before going live, so the charts are not empty",
        )
        parser.add_argument(
            "--first-failure-s",
            type=float,
            default=FIRST_FAILURE_S,
            help="seconds after the start at which a GPU of a running pretraining job faults, "
            "so a live failure is detected, diagnosed and recovered early (0: at once; -1: "
            f"none but the workload's own; default {FIRST_FAILURE_S:g})",
        )

    def handle(self, *args, **opts):
        clusters = [c for c in opts["clusters"].split(",") if c]
        if not clusters or opts["nodes_per_cluster"] < 1 or opts["gpus_per_node"] < 1:
            raise CommandError("need at least one cluster, node and GPU")
        if not (opts["first_failure_s"] >= 0 or opts["first_failure_s"] == -1):
            raise CommandError("--first-failure-s: seconds, 0 or more, or -1 for none")
        with socket.socket() as probe:
            if probe.connect_ex((opts["host"], opts["port"])) == 0:
                raise CommandError(
                    f"port {opts['port']} on {opts['host']} is in use (another demo?); "
                    "stop it or pass --port"
                )
        root = Path(settings.BASE_DIR)
        state = embedded.data_dir() / "demo"
        state.mkdir(parents=True, exist_ok=True)

        self.stdout.write("Preparing the database ...")
        call_command("migrate", verbosity=0)
        call_command("telemetry_partitions", stdout=io.StringIO())
        password = self._demo_user()
        tokens: dict[str, str] = {}
        for c in clusters:
            hosts = [node_name(c, n) for n in range(1, opts["nodes_per_cluster"] + 1)]
            # The simulator sends each cluster's job events from its first node, as a site
            # runs the Slurm watcher on one host: that node gets the scheduler role.
            for flags, names in ((["--scheduler"], hosts[:1]), ([], hosts[1:])):
                if names:
                    out = io.StringIO()
                    call_command(
                        "issue_node_token", "--cluster", c, "--json", *flags, *names, stdout=out
                    )
                    tokens.update(json.loads(out.getvalue()))
        for c in clusters:
            # The demo acts on what it diagnoses, through the simulated executor (labelled
            # as such on every page); a real cluster starts in dry_run.
            call_command(
                "recovery_mode", "--cluster", c, "--mode", "auto", "--executor", "simulated",
                stdout=io.StringIO(),
            )  # fmt: skip
        for team, accounts in DEMO_TEAMS.items():
            call_command("team_create", team, "--account", accounts, stdout=io.StringIO())
        checkpoint = self._model_root(state / "models")
        token_file = state / "tokens.json"
        token_file.write_text(json.dumps(tokens))
        token_file.chmod(0o600)

        env = dict(os.environ)  # carries DATABASE_URL / CELERY_BROKER_URL set by settings
        env["PYTHONUNBUFFERED"] = "1"
        # Links in the demo's emails point at this server, not the default port.
        env.setdefault("VIGIL_BASE_URL", f"http://{opts['host']}:{opts['port']}")
        # The demo's model root first (the form's example lives there), then any configured.
        roots = [str(state / "models"), *settings.VIGIL_EVAL_MODEL_ROOTS]
        env["VIGIL_EVAL_MODEL_ROOTS"] = ",".join(dict.fromkeys(roots))
        settings.VIGIL_EVAL_MODEL_ROOTS = list(dict.fromkeys(roots))
        # What the simulated executor runs (drain, requeue) reaches the simulated scheduler
        # through this folder, so a requeued job runs again; emptied of an earlier run's.
        inbox = state / "scheduler-inbox"
        inbox.mkdir(exist_ok=True)
        for stale in inbox.iterdir():
            stale.unlink()
        env[INBOX_ENV] = str(inbox)
        if opts["first_failure_s"] >= 0:
            env[FIRST_FAULT_ENV] = f"{opts['first_failure_s']:g}"
        else:
            env.pop(FIRST_FAULT_ENV, None)
        py = sys.executable
        sim = [
            "--source", "simulated", "--clusters", ",".join(clusters),
            "--nodes-per-cluster", str(opts["nodes_per_cluster"]),
            "--gpus-per-node", str(opts["gpus_per_node"]), "--token-file", str(token_file),
            "--broker", settings.CELERY_BROKER_URL, "--spool-dir", str(state / "spool"),
            "--seed", "1",
        ]  # fmt: skip
        # History only on a fresh demo: a second run must not write a different past over
        # the first run's samples. The live collector sends it first and carries on from it,
        # so the jobs running at the end of the history are still running live.
        history_done = state / "history-sent"
        history = 0 if history_done.exists() else opts["backfill_minutes"]
        ready = state / "collector-ready"
        ready.unlink(missing_ok=True)
        commands = {
            "worker": [py, "-m", "celery", "-A", "webapp", "worker", "-Q",
                       ",".join(["ingest", "default", *(f"recovery.{c}" for c in clusters)]),
                       "-c", "2", "-l", "WARNING", "--without-gossip", "--without-mingle"],
            "beat": [py, "-m", "celery", "-A", "webapp", "beat", "-l", "WARNING",
                     "--schedule", str(state / "celerybeat-schedule")],
            "web": [py, "manage.py", "runserver", "--noreload",
                    f"{opts['host']}:{opts['port']}"],
        }  # fmt: skip
        procs: dict[str, subprocess.Popen] = {}
        logs = state / "logs"
        logs.mkdir(exist_ok=True)

        def start(name: str, command: list[str]) -> None:
            out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the child)
            # Own session: Ctrl-C reaches only this command, which then stops the children
            # in order (collectors first, so the worker can drain what they sent).
            procs[name] = subprocess.Popen(
                command,
                cwd=root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def interrupt(signum, frame):
            raise KeyboardInterrupt

        # SIGTERM (a supervisor, `kill`) stops the demo as cleanly as Ctrl-C does.
        signal.signal(signal.SIGTERM, interrupt)
        signal.signal(signal.SIGINT, interrupt)
        try:
            for name, command in commands.items():
                start(name, command)
            live = [py, "-m", "collectors", *sim, "--interval", str(opts["interval"])]
            live += ["--ready-file", str(ready)]
            if history:
                self.stdout.write(f"Simulating the last {history} minutes ...")
                live += ["--history-minutes", str(history)]
            start("collectors", live)
            due = time.time() + opts["first_failure_s"]
            self._wait_until_ready(procs["collectors"], ready, logs / "collectors.log")
            if history:
                history_done.touch()
            eval_cluster = sorted(clusters)[0]  # the one the evaluation page opens on
            eval_args = [
                "--cluster", eval_cluster, "--model", str(checkpoint),
                "--datasets", str(EVAL_DATASETS), "--model-size-gb", str(EVAL_MODEL_SIZE_GB),
                "--nodes", str(min(2, opts["nodes_per_cluster"])),
                "--gpus-per-node", str(opts["gpus_per_node"]), "--plan-only", "--unless-any",
            ]  # fmt: skip
            eval_until = time.monotonic() + EVAL_PLAN_WAIT_S
            gpus = len(clusters) * opts["nodes_per_cluster"] * opts["gpus_per_node"]
            first = ""
            if opts["first_failure_s"] >= 0:
                at = time.strftime("%H:%M:%S", time.localtime(due))
                first = f"  first live failure: a GPU fault due at about {at} (see /recovery/)\n"
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nVigil is running: http://{opts['host']}:{opts['port']}/\n"
                    f"  login: {DEMO_USER} / {password}\n"
                    f"  simulated: {len(clusters)} clusters, {len(tokens)} nodes, {gpus} GPUs, "
                    f"one sample every {opts['interval']:g} s\n"
                    f"{first}"
                    f"  logs: {logs}\n"
                    "Press Ctrl-C to stop everything."
                )
            )
            while True:
                if eval_args and not self._plan_evaluation(eval_args, eval_until):
                    eval_args = []
                for name, proc in procs.items():
                    if proc.poll() is not None:
                        raise CommandError(
                            f"{name} exited with code {proc.returncode}; see {logs / name}.log"
                        )
                time.sleep(1)
        except KeyboardInterrupt:
            self.stdout.write("\nStopping ...")
        finally:
            for proc in reversed(procs.values()):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs.values():
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
            # Stop the embedded servers only if this run started them (another demo, or a
            # developer's shell, may be using ones that were already running).
            from django.db import connections

            connections.close_all()
            for instance in (embedded.CACHE, embedded.BROKER):
                if instance in embedded.started_here:
                    embedded.redis_stop(instance)
            if "postgres" in embedded.started_here:
                embedded.postgres_stop()
            self.stdout.write("Stopped.")

    def _model_root(self, root: Path) -> Path:
        """The demo's model root with the form's example checkpoint in it (a small file)."""
        checkpoint = root.joinpath(*EXAMPLE_CHECKPOINT)
        checkpoint.mkdir(parents=True, exist_ok=True)
        weights = checkpoint / "model.safetensors"
        if not weights.exists():
            weights.write_bytes(b"\0" * 4096)
        return checkpoint

    def _plan_evaluation(self, args: list[str], until: float) -> bool:
        """Plan the demo's evaluation as an operator would (plans only: the demo has no Slurm
        to run it). True: try again later (the cluster's GPUs are not registered yet)."""
        out = io.StringIO()
        try:
            call_command("eval_request", *args, stdout=out)
        except CommandError as exc:
            if str(exc).startswith("nodes:") and time.monotonic() < until:
                return True
            self.stdout.write(self.style.WARNING(f"No evaluation plan: {exc}"))
            return False
        self.stdout.write(f"Evaluation: {out.getvalue().strip()}")
        return False

    def _wait_until_ready(self, collector: subprocess.Popen, ready: Path, log: Path) -> None:
        """Until the collector has written its ready file (history handed to the broker)."""
        while not ready.exists():
            if collector.poll() is not None:
                raise CommandError(
                    f"the collector exited with code {collector.returncode}; see {log}"
                )
            time.sleep(0.5)

    def _demo_user(self) -> str:
        password = os.environ.get("VIGIL_DEMO_PASSWORD") or secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(
            username=DEMO_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        user.set_password(password)
        user.email = user.email or f"{DEMO_USER}@localhost"  # the alert emails' outbox address
        user.save()
        return password
