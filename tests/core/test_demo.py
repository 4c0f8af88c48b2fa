"""`make demo` runs `manage.py demo`: it must show live data quickly and stop cleanly."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import psutil
import pytest
from django.db import connection

from tests.helpers import ROOT, database_url, subprocess_env, wait_for

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gpu_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def _demo_user_opener(base: str) -> urllib.request.OpenerDirector:
    """A browser session logged in with the demo's printed password."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{base}/login/", timeout=10).read()
    csrf = next(c.value for c in jar if c.name == "csrftoken")
    form = urllib.parse.urlencode(
        {"username": "demo", "password": "demo-pass-123", "csrfmiddlewaretoken": csrf}
    ).encode()
    request = urllib.request.Request(f"{base}/login/", data=form, headers={"Referer": base})
    opener.open(request, timeout=10).read()
    return opener


def _overview_as_demo_user(base: str) -> dict:
    with _demo_user_opener(base).open(f"{base}/api/v1/overview.json?gpus=1", timeout=10) as r:
        return json.loads(r.read())


def _evaluation_run():
    from webapp.evaluation.models import EvaluationRun

    return EvaluationRun.objects.first()


def _live_failure_recovered():
    """(failure, requeue, the job's start after it) of a live GPU failure the demo recovered:
    its plan's requeue succeeded and the simulated scheduler started the job again."""
    from webapp.jobs.models import JobEvent
    from webapp.recovery.models import RecoveryAction

    requeue = (
        RecoveryAction.objects.filter(
            kind="requeue", status="succeeded", plan__failure__kind="gpu_error"
        )
        .select_related("plan__failure")
        .first()
    )
    if requeue is None:
        return None
    again = JobEvent.objects.filter(
        job_id=requeue.job_id, kind="started", ts__gte=requeue.ended_at
    ).first()
    return again and (requeue.plan.failure, requeue, again)


def _node_drained(node_id: int):
    from webapp.fleet.models import Node

    return Node.objects.filter(pk=node_id, state="drained").first()


def test_demo_serves_live_data_and_ctrl_c_stops_everything(transactional_db, broker, tmp_path):
    port = _free_port()
    env = subprocess_env(database_url(), VIGIL_DEMO_PASSWORD="demo-pass-123")
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        demo = subprocess.Popen(
            [
                sys.executable, "manage.py", "demo", "--port", str(port),
                "--clusters", "democluster", "--nodes-per-cluster", "3", "--gpus-per-node", "4",
                "--interval", "1", "--backfill-minutes", "5", "--first-failure-s", "0",
            ],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for(lambda: "Vigil is running" in log.read_text(), timeout=120, interval=0.5)
            assert "login: demo / demo-pass-123" in log.read_text()
            children = psutil.Process(demo.pid).children(recursive=True)
            assert len(children) >= 4  # web, worker, beat, collectors

            # Live: new samples keep arriving after start-up (backfill plus one per second).
            first = wait_for(_gpu_samples, timeout=60)
            wait_for(lambda: _gpu_samples() > first, timeout=60)

            # A person logs in with the printed password and sees every GPU reporting.
            payload = _overview_as_demo_user(f"http://127.0.0.1:{port}")
            reporting = [g for g in payload["gpus"] if g["ts"] is not None]
            assert len(reporting) == 12

            # The evaluation page has a plan to look at: the demo planned one (plans only: it
            # has no Slurm to run it) of the form's own example checkpoint, which it made
            # under its model root, so the example is a path the page accepts. (Two of the
            # three nodes: the first failure below drains one.)
            run = wait_for(_evaluation_run, timeout=120, interval=1)
            assert run.status == "planned" and run.cluster.name == "democluster"
            assert run.prediction["speedup"] > 1 and len(run.datasets) == 24
            assert run.model_path.endswith("/internlm-7b/step-1000")
            base = f"http://127.0.0.1:{port}"
            with _demo_user_opener(base).open(f"{base}/evaluation/", timeout=10) as r:
                html = r.read().decode()
            assert "predicted speedup" in html and f"run {run.pk}:" in html
            placeholder = re.search(r'id="model-path"[^>]*placeholder="([^"]+)"', html)[1]
            assert os.path.realpath(placeholder) == run.model_path
            assert os.path.isfile(os.path.join(placeholder, "model.safetensors"))

            # The first live failure (a GPU fault of the running pretraining job, at once
            # here) closes the loop: detected as it happened, diagnosed, the job requeued by the
            # simulated executor and started again by the simulated scheduler, and the
            # recovery page counts a manual intervention avoided.
            failure, requeue, again = wait_for(_live_failure_recovered, timeout=60, interval=0.5)
            assert failure.cause == "gpu_nvlink"
            assert (failure.detected_at - failure.occurred_at).total_seconds() < 60
            assert again.ts >= requeue.ended_at >= failure.diagnosed_at
            with _demo_user_opener(base).open(f"{base}/recovery/", timeout=10) as r:
                html = r.read().decode()
            assert int(re.search(r'id="avoided">(\d+)<', html)[1]) >= 1, html
            # The failed GPU's node: drained (draining until the requeued job left it, as the
            # simulated scheduler reports it), with the reason the drain gave.
            node = wait_for(lambda: _node_drained(failure.node_id), timeout=30, interval=0.5)
            assert node.state_reason == f"vigil: gpu_nvlink failure {failure.pk}"
        finally:
            demo.send_signal(signal.SIGINT)  # Ctrl-C
            demo.wait(60)

    assert "Stopped." in log.read_text()
    time.sleep(0.5)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
