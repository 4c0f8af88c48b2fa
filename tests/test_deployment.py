"""docker-compose.yml cannot run here (no Docker engine): check every service refers to
something that exists, and every variable it needs is documented in .env.example."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _command(name: str) -> list[str]:
    command = SERVICES[name].get("command")
    return command if isinstance(command, list) else str(command).split()


def test_compose_has_the_services_of_a_deployment():
    assert {"postgres", "redis", "web", "worker", "beat", "collector"} <= set(SERVICES)


def test_web_serves_the_wsgi_application_with_gunicorn():
    command = _command("web")
    assert command[0] == "gunicorn"
    module, attr = command[1].split(":")
    assert callable(getattr(importlib.import_module(module), attr))
    settings_text = (ROOT / "webapp" / "settings.py").read_text()
    assert "whitenoise.middleware.WhiteNoiseMiddleware" in settings_text


@pytest.mark.parametrize("service", ["worker", "beat"])
def test_celery_services_use_the_project_app(service):
    command = _command(service)
    assert command[:3] == ["celery", "-A", "webapp"]
    from webapp.celery import app

    assert app.main == "vigil"
    if service == "worker":
        queues = set(command[command.index("-Q") + 1].split(","))
        routed = {r["queue"] for r in app.conf.task_routes.values()}
        assert routed <= queues, f"tasks routed to {routed - queues} that no worker consumes"


def test_migrate_runs_a_real_management_command():
    from django.core.management import get_commands

    command = _command("migrate")
    assert command[:2] == ["python", "manage.py"]
    assert command[2] in get_commands()


def test_collector_is_the_declared_console_script_and_accepts_its_flags():
    command = _command("collector")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts[command[0]].split(":")
    assert callable(getattr(importlib.import_module(module), func))
    help_text = subprocess.run(
        [sys.executable, "-m", "collectors", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    for flag in [c for c in command[1:] if c.startswith("--")]:
        assert flag in help_text, f"collector has no {flag} flag"


def test_every_variable_is_documented_in_env_example():
    documented = set(re.findall(r"^([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    used = set(re.findall(r"\$\{([A-Z_]+)", (ROOT / "docker-compose.yml").read_text()))
    used |= set(
        re.findall(r"""env\w*\(\s*["']([A-Z_]+)""", (ROOT / "webapp" / "settings.py").read_text())
    )
    used |= set(
        re.findall(
            r"""environ(?:\.get)?[\[(]\s*["']([A-Z_]+)""",
            (ROOT / "webapp" / "settings.py").read_text(),
        )
    )
    missing = used - documented - {"DJANGO_SETTINGS_MODULE"}
    assert not missing, f"not in .env.example: {sorted(missing)}"


def test_dockerfile_copies_only_what_exists():
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"
