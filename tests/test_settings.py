"""Settings come from the environment and refuse what would be unsafe or malformed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_settings(
    *, show: str = "", debug: str | None = "true", **env: str
) -> subprocess.CompletedProcess:
    """Import the settings in a fresh process with `env`; print `show` (an expression of settings).

    VIGIL_DEBUG is `debug` unless `env` sets it; None leaves it unset."""
    full = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "VIGIL_DEBUG")}
    full.update(
        DATABASE_URL="postgresql://x@localhost/x",
        CELERY_BROKER_URL="redis://localhost",
        VIGIL_CACHE_URL="redis://cache.invalid:6379/0",
    )
    if debug is not None:
        full["VIGIL_DEBUG"] = debug
    full.update(env)
    code = "from webapp.settings import *" + (f"; print(repr({show}))" if show else "")
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
    )


def test_production_refuses_the_development_secret():
    result = _load_settings(VIGIL_DEBUG="false")
    assert result.returncode != 0
    assert "SECRET_KEY is the development default" in result.stderr


PRODUCTION = {
    "SECRET_KEY": "k" * 50,
    "ALLOWED_HOSTS": "vigil.example.org",
    "VIGIL_BASE_URL": "https://vigil.example.org",
}


def test_production_starts_with_a_real_secret_and_named_hosts():
    result = _load_settings(VIGIL_DEBUG="false", **PRODUCTION)
    assert result.returncode == 0, result.stderr


def test_debug_is_off_unless_asked_for():
    result = _load_settings(show="DEBUG", debug=None, **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
    assert "SECRET_KEY is the development default" in _load_settings(debug=None).stderr


@pytest.mark.parametrize("hosts", ["*", "", " , ", "vigil.example.org,*"])
def test_production_refuses_any_host_or_none(hosts):
    result = _load_settings(VIGIL_DEBUG="false", **{**PRODUCTION, "ALLOWED_HOSTS": hosts})
    assert result.returncode != 0
    assert "ImproperlyConfigured: ALLOWED_HOSTS must name" in result.stderr


def test_proxy_https_header_is_configurable():
    result = _load_settings(
        show="SECURE_PROXY_SSL_HEADER", VIGIL_PROXY_SSL_HEADER="X-Forwarded-Proto"
    )
    assert result.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https')"
    assert _load_settings(show="SECURE_PROXY_SSL_HEADER").stdout.strip() == "None"
    bad = _load_settings(VIGIL_PROXY_SSL_HEADER="X-Forwarded-Proto: https")
    assert bad.returncode != 0
    assert "VIGIL_PROXY_SSL_HEADER='X-Forwarded-Proto: https' is not an HTTP header" in bad.stderr


def test_hsts_and_redirect_come_from_the_environment():
    env = {
        "VIGIL_SSL_REDIRECT": "true",
        "VIGIL_HSTS_SECONDS": "31536000",
        "VIGIL_HSTS_INCLUDE_SUBDOMAINS": "yes",
        "VIGIL_HSTS_PRELOAD": "on",
    }
    shown = "(SECURE_SSL_REDIRECT, SECURE_HSTS_SECONDS, SECURE_HSTS_INCLUDE_SUBDOMAINS, SECURE_HSTS_PRELOAD)"
    result = _load_settings(show=shown, **env)
    assert result.stdout.strip() == "(True, 31536000, True, True)", result.stderr
    assert "VIGIL_HSTS_SECONDS='a year' is not an integer" in (
        _load_settings(VIGIL_HSTS_SECONDS="a year").stderr
    )
    assert "VIGIL_SSL_REDIRECT='sometimes' is not a boolean" in (
        _load_settings(VIGIL_SSL_REDIRECT="sometimes").stderr
    )
    short = _load_settings(**{**env, "VIGIL_HSTS_SECONDS": "3600"})
    assert short.returncode != 0 and "VIGIL_HSTS_PRELOAD=true needs" in short.stderr


@pytest.mark.parametrize(
    ("broker", "cache"),
    [
        ("redis://redis:6379/0", "redis://redis:6379/1"),
        ("redis://redis/0", "redis://REDIS:6379/5"),
        ("redis+socket:///run/vigil/redis.sock", "unix:///run/vigil/redis.sock?db=1"),
    ],
)
def test_cache_on_the_brokers_server_is_refused(broker, cache):
    result = _load_settings(CELERY_BROKER_URL=broker, VIGIL_CACHE_URL=cache)
    assert result.returncode != 0
    assert "VIGIL_CACHE_URL names the broker's Redis server" in result.stderr


def test_cache_on_its_own_server_is_used():
    result = _load_settings(
        show="CACHES['default']['LOCATION']",
        CELERY_BROKER_URL="redis://redis:6379/0",
        VIGIL_CACHE_URL="redis://cache:6379/0",
    )
    assert result.stdout.strip() == "'redis://cache:6379/0'", result.stderr
    bad = _load_settings(VIGIL_CACHE_URL="memcached://cache:11211")
    assert bad.returncode != 0 and "is not a Redis URL" in bad.stderr


def test_the_embedded_cache_is_not_the_embedded_broker():
    from django.conf import settings

    from webapp.core import embedded

    cache_socket = embedded.redis_socket(embedded.CACHE)
    broker_socket = embedded.redis_socket(embedded.BROKER)
    assert cache_socket != broker_socket
    assert settings.CACHES["default"]["LOCATION"] == f"unix://{cache_socket}"
    assert settings.CELERY_BROKER_URL.endswith(str(broker_socket))


def test_api_body_cap_is_configurable():
    result = _load_settings(show="VIGIL_API_MAX_BODY_BYTES", VIGIL_API_MAX_BODY_BYTES="65536")
    assert result.stdout.strip() == "65536"
    assert "below its minimum" in _load_settings(VIGIL_API_MAX_BODY_BYTES="10").stderr


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


def test_trusted_proxy_count_is_off_by_default_and_checked():
    assert _load_settings(show="VIGIL_TRUSTED_PROXY_COUNT").stdout.strip() == "0"
    shown = _load_settings(show="VIGIL_TRUSTED_PROXY_COUNT", VIGIL_TRUSTED_PROXY_COUNT="2")
    assert shown.stdout.strip() == "2"
    bad = _load_settings(VIGIL_TRUSTED_PROXY_COUNT="-1")
    assert bad.returncode != 0 and "VIGIL_TRUSTED_PROXY_COUNT=-1 is below its minimum 0" in (
        bad.stderr
    )


def test_a_send_deadline_longer_than_half_the_lease_is_refused():
    bad = _load_settings(VIGIL_ALERTS_SEND_TIMEOUT_S="40", VIGIL_ALERTS_LEASE_S="60")
    assert bad.returncode != 0
    assert "VIGIL_ALERTS_SEND_TIMEOUT_S=40 must be at most half of VIGIL_ALERTS_LEASE_S=60" in (
        bad.stderr
    )
    good = _load_settings(show="VIGIL_ALERTS_SEND_TIMEOUT_S", VIGIL_ALERTS_LEASE_S="60")
    assert good.stdout.strip() == "20"


def _env_example_names() -> list[str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return [line.split("=", 1)[0] for line in lines if "=" in line and not line.startswith("#")]


# Every uppercase setting but the callables (their repr names a memory address).
SETTINGS_SHOWN = "{k: v for k, v in sorted(globals().items()) if k.isupper() and not callable(v)}"


def test_an_empty_value_means_the_default_for_every_variable():
    """`.env.example` writes every variable, most as `NAME=`: copied as is, each must mean its
    default (an empty VIGIL_HEALTHCHECK_SCRIPT turned the pre-resume health check off)."""
    kept = ("DATABASE_URL", "CELERY_BROKER_URL", "VIGIL_CACHE_URL", "VIGIL_DEBUG")
    names = [n for n in _env_example_names() if n not in kept]
    assert "VIGIL_HEALTHCHECK_SCRIPT" in names and len(names) > 60
    with pytest.MonkeyPatch.context() as mp:
        for name in names:
            mp.delenv(name, raising=False)
        defaults = _load_settings(show=SETTINGS_SHOWN)
        empty = _load_settings(show=SETTINGS_SHOWN, **dict.fromkeys(names, ""))
    assert defaults.returncode == 0, defaults.stderr
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == defaults.stdout
    script = _load_settings(show="VIGIL_HEALTHCHECK_SCRIPT", VIGIL_HEALTHCHECK_SCRIPT="")
    assert script.stdout.strip().endswith("deploy/healthcheck/nccl_pairwise.py'")


def test_the_health_check_is_turned_off_only_in_so_many_words():
    off = _load_settings(show="VIGIL_HEALTHCHECK_SCRIPT", VIGIL_HEALTHCHECK_SCRIPT="none")
    assert off.stdout.strip() == "''"


def test_production_refuses_emails_linking_to_localhost_by_default():
    env = {k: v for k, v in PRODUCTION.items() if k != "VIGIL_BASE_URL"}
    for unset in ({}, {"VIGIL_BASE_URL": ""}):
        result = _load_settings(VIGIL_DEBUG="false", **env, **unset)
        assert result.returncode != 0
        assert "VIGIL_BASE_URL must be set when VIGIL_DEBUG=false" in result.stderr
    shown = _load_settings(show="VIGIL_BASE_URL", VIGIL_DEBUG="false", **PRODUCTION)
    assert shown.stdout.strip() == "'https://vigil.example.org'"
    # Debug keeps the local default; a URL that is not one is refused everywhere.
    assert _load_settings(show="VIGIL_BASE_URL").stdout.strip() == "'http://127.0.0.1:8000'"
    bad = _load_settings(VIGIL_BASE_URL="vigil.example.org")
    assert bad.returncode != 0
    assert "VIGIL_BASE_URL='vigil.example.org' is not an http(s):// URL" in bad.stderr
