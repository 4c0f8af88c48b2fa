"""Helpers shared by the node agent's tests (imported, never defined, by test modules)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT

TOKEN = "a-node-token-of-enough-length"


def collector(*args: str, env: dict | None = None, timeout: float = 60):
    """`python -m collectors *args` run as an operator runs it, with no broker from the test
    environment unless `env` names one."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL",)}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "collectors", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
