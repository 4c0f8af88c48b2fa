"""Settings come from the environment and refuse what would be unsafe or malformed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_settings(**env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    full.update(DATABASE_URL="postgresql://x@localhost/x", CELERY_BROKER_URL="redis://localhost")
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import webapp.settings"],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
    )


def test_production_refuses_the_development_secret():
    result = _load_settings(VIGIL_DEBUG="false")
    assert result.returncode != 0
    assert "SECRET_KEY is the development default" in result.stderr


def test_production_starts_with_a_real_secret():
    result = _load_settings(VIGIL_DEBUG="false", SECRET_KEY="k" * 50)
    assert result.returncode == 0, result.stderr


def test_malformed_number_is_refused_with_the_variable_named():
    result = _load_settings(VIGIL_RETENTION_DAYS="two weeks")
    assert result.returncode != 0
    assert "VIGIL_RETENTION_DAYS='two weeks' is not an integer" in result.stderr


def test_malformed_boolean_is_refused():
    result = _load_settings(VIGIL_DEBUG="maybe")
    assert result.returncode != 0
    assert "VIGIL_DEBUG='maybe' is not a boolean" in result.stderr


def test_failure_settings_refuse_what_would_break_diagnosis():
    result = _load_settings(VIGIL_STRAGGLER_MINUTES="0")
    assert result.returncode != 0
    assert "VIGIL_STRAGGLER_MINUTES" in result.stderr
    result = _load_settings(VIGIL_CHECKPOINT_WRITE_S="0")
    assert result.returncode != 0
    assert "VIGIL_CHECKPOINT_WRITE_S=0 is not a duration" in result.stderr
