"""Vigil settings: one file, driven by the environment, whose defaults run locally with no setup.

Every variable is listed in `.env.example`. Malformed values are refused at start-up with a
message naming the variable, instead of being guessed at.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
import dj_email_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env(name: str, default: str = "") -> str:
    """The variable's value, stripped; unset or empty means the default. `.env.example` writes
    every variable, most as `NAME=`, and docker compose passes `${NAME:-}` through as empty:
    an empty value must never mean "off" or "zero" by accident."""
    return os.environ.get(name, "").strip() or default


def envbool(name: str, default: str = "False") -> bool:
    value = env(name, default).lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true or false)")


def envint(name: str, default: str, minimum: int | None = None) -> int:
    value = env(name, default)
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below its minimum {minimum}")
    return number


def envfloat(
    name: str, default: str, minimum: float | None = None, maximum: float | None = None
) -> float:
    value = env(name, default)
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below its minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above its maximum {maximum}")
    return number


DEV_SECRET_KEY = "vigil-dev-secret-key-not-for-production"  # noqa: S105 (refused in production)

# Closed unless asked: `make demo` and the tests set VIGIL_DEBUG=true themselves.
DEBUG = envbool("VIGIL_DEBUG", "False")
# Offline commands (manage.py diagnose, makemigrations --check, collectstatic at image build)
# need no database or broker: nothing is started and any attempt to connect fails loudly.
# They serve no request either, so the secret key and host checks below do not apply.
VIGIL_OFFLINE = envbool("VIGIL_OFFLINE", "False")
_serving = not DEBUG and not VIGIL_OFFLINE
SECRET_KEY = env("SECRET_KEY", DEV_SECRET_KEY)
if _serving and SECRET_KEY == DEV_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is the development default; set SECRET_KEY to a long random value "
        "before running with VIGIL_DEBUG=false"
    )
if _serving and len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY is shorter than 32 characters")


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env(name, default).split(",") if item.strip()]


# In debug an empty list means localhost only (Django's rule); outside debug the hosts this
# site answers to must be named: "*" would let any Host header build password-reset links
# and absolute URLs.
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS")
if _serving and (not ALLOWED_HOSTS or "*" in ALLOWED_HOSTS):
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must name this site's host names (comma-separated) when "
        "VIGIL_DEBUG=false; '*' and an empty list are refused"
    )
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")

# --- HTTPS behind a proxy ------------------------------------------------------------------
# The header a TLS-terminating proxy sets to "https" (e.g. X-Forwarded-Proto). Only set it if
# the proxy always overwrites that header: otherwise a client could claim HTTPS itself.
_proxy_header = env("VIGIL_PROXY_SSL_HEADER")
if _proxy_header and not re.fullmatch(r"[A-Za-z0-9]+(-[A-Za-z0-9]+)*", _proxy_header):
    raise ImproperlyConfigured(
        f"VIGIL_PROXY_SSL_HEADER={_proxy_header!r} is not an HTTP header name "
        "(e.g. X-Forwarded-Proto)"
    )
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https") if _proxy_header else None
)
SECURE_SSL_REDIRECT = envbool("VIGIL_SSL_REDIRECT", "False")
SECURE_HSTS_SECONDS = envint("VIGIL_HSTS_SECONDS", "0", minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("VIGIL_HSTS_INCLUDE_SUBDOMAINS", "False")
SECURE_HSTS_PRELOAD = envbool("VIGIL_HSTS_PRELOAD", "False")
# The browsers' preload list takes a site only with a max-age of at least a year and
# includeSubDomains (hstspreload.org, "Submission Requirements").
HSTS_PRELOAD_MIN_S = 31_536_000
if SECURE_HSTS_PRELOAD and (
    SECURE_HSTS_SECONDS < HSTS_PRELOAD_MIN_S or not SECURE_HSTS_INCLUDE_SUBDOMAINS
):
    raise ImproperlyConfigured(
        f"VIGIL_HSTS_PRELOAD=true needs VIGIL_HSTS_SECONDS>={HSTS_PRELOAD_MIN_S} and "
        "VIGIL_HSTS_INCLUDE_SUBDOMAINS=true (the preload list refuses anything less)"
    )

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "axes",
    "csp",
    "webapp.core",
    "webapp.fleet",
    "webapp.telemetry",
    "webapp.jobs",
    "webapp.failures",
    "webapp.teams",
    "webapp.recovery",
    "webapp.alerts",
    "webapp.energy",
    "webapp.evaluation",
    # Pages composing several apps (the node page, the job page's incident timeline).
    "webapp.pages",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Gzip pages and JSON (the overview's payload is mostly repeated keys); after WhiteNoise, which
    # serves static files already compressed. BREACH: Django pads gzip output with random bytes
    # (since 4.2) and the JSON endpoints carry no secret.
    "django.middleware.gzip.GZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a login unless its view is marked @login_not_required (health, metrics).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # The branded 404 page under DEBUG too (`make demo` runs with it on), as handler404 is
    # outside it.
    "webapp.core.pages.NotFoundInDebugMiddleware",
    # Last, as django-axes asks: it turns a lockout raised during login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- Database and broker -------------------------------------------------------------------
# With no URL configured, webapp/core/embedded.py starts a private PostgreSQL and Redis under
# VIGIL_DATA_DIR, so `make demo` and `make test` need nothing installed.
if VIGIL_OFFLINE:
    # (an empty value, as .env writes it, is unset here too)
    os.environ["DATABASE_URL"] = env(
        "DATABASE_URL", "postgresql://offline@offline.invalid:1/offline"
    )
    os.environ["CELERY_BROKER_URL"] = env("CELERY_BROKER_URL", "memory://")
VIGIL_EMBEDDED_POSTGRES = not os.environ.get("DATABASE_URL")
if VIGIL_EMBEDDED_POSTGRES:
    from webapp.core import embedded

    os.environ["DATABASE_URL"] = embedded.postgres_url()
DATABASES = {
    "default": dj_database_url.parse(
        os.environ["DATABASE_URL"], conn_max_age=60, conn_health_checks=True
    )
}

VIGIL_EMBEDDED_REDIS = not os.environ.get("CELERY_BROKER_URL")
if VIGIL_EMBEDDED_REDIS:
    from webapp.core import embedded

    os.environ["CELERY_BROKER_URL"] = embedded.broker_url()
CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# GPU sample batches are stored several to a transaction: a worker takes up to
# VIGIL_INGEST_GROUP waiting batches (or those that came within VIGIL_INGEST_GROUP_WAIT_S) at
# once; 8 to a group instead of 1 raised bench/ingest.py by about a quarter. A worker holds
# at most VIGIL_WORKER_PREFETCH unacknowledged messages per process, so it must hold a group.
VIGIL_INGEST_GROUP = envint("VIGIL_INGEST_GROUP", "8", minimum=1)
VIGIL_INGEST_GROUP_WAIT_S = envfloat("VIGIL_INGEST_GROUP_WAIT_S", "0.1", minimum=0.001)
CELERY_WORKER_PREFETCH_MULTIPLIER = envint(
    "VIGIL_WORKER_PREFETCH", str(VIGIL_INGEST_GROUP), minimum=VIGIL_INGEST_GROUP
)
# Size caps, checked before any work: a batch's JSON, and its compressed form in the outbox or
# a message. An 8-GPU node's 600 intervals are about 1.1 MB of JSON, so 8 MiB leaves room for
# 64-GPU nodes; decompression stops at the cap, so a zstd/zlib bomb costs at most that much.
VIGIL_BATCH_MAX_BYTES = envint("VIGIL_BATCH_MAX_BYTES", str(8 * 2**20), minimum=2**16)
VIGIL_BATCH_MAX_COMPRESSED_BYTES = envint(
    "VIGIL_BATCH_MAX_COMPRESSED_BYTES", str(4 * 2**20), minimum=2**12
)
# A batch delivered this many times without finishing (it kills its worker, or fails to store
# for a reason that is not a database outage) is refused as `poison` instead of looping.
VIGIL_POISON_DELIVERIES = envint("VIGIL_POISON_DELIVERIES", "5", minimum=1)
# How long a process trusts the node key it read: a rotated token is locked out of every
# worker and web process within this time (the requirement is 60 s at most).
VIGIL_AUTH_CACHE_S = envfloat("VIGIL_AUTH_CACHE_S", "30", minimum=0, maximum=60)
# The server-side secret node signing keys are kept under (webapp/fleet/services.py): what
# PostgreSQL stores of a node's token signs nothing without it. SECRET_KEY when unset;
# changing it locks every node out until its token is issued again.
VIGIL_NODE_KEY_SECRET = env("VIGIL_NODE_KEY_SECRET", SECRET_KEY)
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "vigil.telemetry.ingest_batch": {"queue": "ingest"},
    "vigil.jobs.ingest_events": {"queue": "ingest"},
    "vigil.failures.ingest_node_events": {"queue": "ingest"},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task whose worker died is redelivered after this many seconds (Redis has no per-consumer
# acknowledgements; kombu restores unacknowledged messages after the visibility timeout).
# Workers look for such messages every VIGIL_BROKER_RESTORE_INTERVAL_S seconds (kombu's
# default sweep is 10 s x a throttle of 10, so a lost task could wait 100 s more).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": envint("VIGIL_BROKER_VISIBILITY_TIMEOUT", "600", minimum=1),
    "unacked_restore_interval": envint("VIGIL_BROKER_RESTORE_INTERVAL_S", "30", minimum=1),
    "unacked_restore_throttle": 1,
    # A worker killed during a sweep leaves the sweep's lock behind; kombu's default expiry
    # (300 s) would hold every other worker's recovery back that long. A sweep takes ms.
    "unacked_mutex_expire": 15,
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes the database connection around every task unless this is set;
# a new PostgreSQL backend per batch cost about a third of the ingest CPU (py-spy).
CELERY_DB_REUSE_MAX = envint("VIGIL_WORKER_DB_REUSE_MAX", "1000", minimum=1)


# --- Cache ---------------------------------------------------------------------------------
# Shared by every web and worker process (characterization results warmed by beat, counters
# of refused API requests). Django's Redis cache unpickles what it reads, so it must never
# live on the broker's server: every node holds a credential for the broker and could plant a
# pickle there. VIGIL_CACHE_URL (redis://, rediss://, unix://) names its own server; unset, a
# second embedded Redis is started in its own folder and socket. Chosen over the database
# cache: no table to create before first use, and an atomic INCR for the counters.
def _redis_server(url: str) -> tuple[str, ...] | None:
    """(host, port) or (socket path,) of a Redis URL, to compare two URLs; None if not Redis."""
    parts = urlsplit(url)
    if parts.scheme in ("redis+socket", "unix"):
        return (str(Path(parts.path).resolve()),)
    if parts.scheme in ("redis", "rediss"):
        return ((parts.hostname or "localhost").lower(), str(parts.port or 6379))
    return None


if VIGIL_OFFLINE:
    os.environ["VIGIL_CACHE_URL"] = env("VIGIL_CACHE_URL", "locmem://")
if not os.environ.get("VIGIL_CACHE_URL"):
    from webapp.core import embedded

    os.environ["VIGIL_CACHE_URL"] = embedded.cache_url()
VIGIL_CACHE_URL = os.environ["VIGIL_CACHE_URL"]
if VIGIL_CACHE_URL == "locmem://":
    # Offline commands only: nothing is shared, and nothing needs to be.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    if _redis_server(VIGIL_CACHE_URL) is None:
        raise ImproperlyConfigured(
            f"VIGIL_CACHE_URL={VIGIL_CACHE_URL!r} is not a Redis URL (redis://, rediss://, unix://)"
        )
    if _redis_server(VIGIL_CACHE_URL) == _redis_server(CELERY_BROKER_URL):
        raise ImproperlyConfigured(
            "VIGIL_CACHE_URL names the broker's Redis server (CELERY_BROKER_URL); the cache "
            "unpickles what it reads and nodes can write to the broker: give it its own server"
        )
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": VIGIL_CACHE_URL,
        }
    }

# --- Email ---------------------------------------------------------------------------------
_email = dj_email_url.parse(env("EMAIL_URL", "console://"))
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
if DEBUG and not env("EMAIL_URL"):
    # `make demo` and development: emails are kept in a table the outbox page lists
    # (webapp/alerts/outbox.py), so a newcomer sees what the simulated failures sent.
    EMAIL_BACKEND = "webapp.alerts.outbox.OutboxEmailBackend"
EMAIL_HOST = _email["EMAIL_HOST"]
EMAIL_PORT = _email["EMAIL_PORT"]
EMAIL_HOST_USER = _email["EMAIL_HOST_USER"]
EMAIL_HOST_PASSWORD = _email["EMAIL_HOST_PASSWORD"]
EMAIL_USE_TLS = _email["EMAIL_USE_TLS"]
EMAIL_USE_SSL = _email["EMAIL_USE_SSL"]
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "vigil@localhost")

# --- Auth, i18n, static --------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "pages:overview"
LOGOUT_REDIRECT_URL = "login"

# Failed logins are throttled by django-axes: after VIGIL_LOGIN_FAILURE_LIMIT failures for one
# username from one address, that pair is refused (HTTP 429) for VIGIL_LOGIN_LOCKOUT_MINUTES,
# even with the right password. Per pair, so a guesser cannot lock a colleague out from
# elsewhere. 5 tries and 15 minutes are the project's choice ("Trust boundaries" issue), far
# inside NIST SP 800-63B section 5.2.2's ceiling of 100 consecutive failures.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: it refuses a locked-out pair
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("VIGIL_LOGIN_FAILURE_LIMIT", "5", minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("VIGIL_LOGIN_LOCKOUT_MINUTES", "15", minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Behind a reverse proxy every request's REMOTE_ADDR is the proxy's, so N failures would lock
# that username out for everyone. VIGIL_TRUSTED_PROXY_COUNT: how many proxies in front of
# Vigil append to X-Forwarded-For (0, the default: none, the header is ignored, since any
# client can send one). With N, the client is the Nth entry from the right: the address the
# outermost trusted proxy saw, which a client cannot write (what it sends comes before).
VIGIL_TRUSTED_PROXY_COUNT = envint("VIGIL_TRUSTED_PROXY_COUNT", "0", minimum=0)


def client_ip(request) -> str | None:
    """The login's client address for django-axes (AXES_CLIENT_IP_CALLABLE)."""
    from django.conf import settings as live  # read per request: tests change it

    remote = request.META.get("REMOTE_ADDR")
    count = live.VIGIL_TRUSTED_PROXY_COUNT
    if not count:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if len(hops) < count:
        return remote  # not through every trusted proxy: nothing in the header is trusted
    try:
        return str(ipaddress.ip_address(hops[-count]))
    except ValueError:
        return remote


AXES_CLIENT_IP_CALLABLE = client_ip

# Content-Security-Policy (django-csp): scripts, styles, images and fetches from Vigil itself
# only. Pages have no inline scripts (their data comes in json_script tags, which are data,
# not code). plotly.js adds <style> elements of its own (without 'unsafe-inline' for styles,
# Chromium reported 6 style-src-elem violations from it on the overview), so styles alone
# allow inline; tests/browser/test_security.py checks the pages under this policy. Plotly's
# mode-bar icons and image export use data: URLs.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# collectstatic's target, for production (whitenoise serves it); in debug, files are served
# from STATICFILES_DIRS and no STATIC_ROOT is needed.
STATIC_ROOT = None if DEBUG else BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if not DEBUG:
    SESSION_COOKIE_SECURE = envbool("VIGIL_SECURE_COOKIES", "True")
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "vigil": {"handlers": ["console"], "level": env("VIGIL_LOG_LEVEL", "INFO")},
        # Celery logs two INFO lines per task ("received", "succeeded"): hundreds a second
        # from the ingest queue, and a quarter of a small task's cost. Refused batches, retries
        # while PostgreSQL is down and failures are logged by Vigil at WARNING; the counts are
        # in /metrics. VIGIL_TASK_LOG_LEVEL=INFO brings the per-task lines back.
        **{
            name: {"level": env("VIGIL_TASK_LOG_LEVEL", "WARNING")}
            for name in ("celery.app.trace", "celery.worker.strategy")
        },
    },
}

# --- Vigil ---------------------------------------------------------------------------------
# Retention tiers (README "Storage and retention"). GPU and node samples, raw or compacted,
# are kept this many days (docs/telemetry.md section 9: raw 7-14 days); the 1-minute rollup about
# a month, the hourly rollup three years.
VIGIL_RETENTION_DAYS = envint("VIGIL_RETENTION_DAYS", "14", minimum=1)
VIGIL_ROLLUP_RETENTION_DAYS = envint("VIGIL_ROLLUP_RETENTION_DAYS", "35", minimum=1)
VIGIL_HOURLY_ROLLUP_RETENTION_DAYS = envint("VIGIL_HOURLY_ROLLUP_RETENTION_DAYS", "1096", minimum=1)
# Work records kept past their use (each app's daily prune task): what the diagnosis engine read
# for a failure (the failure and its evidence lines stay), energy exports (rebuilt from the
# rollups on request) and finished alert notifications with the demo's outbox emails.
VIGIL_FAILURE_INPUTS_RETENTION_DAYS = envint("VIGIL_FAILURE_INPUTS_RETENTION_DAYS", "90", minimum=1)
VIGIL_ENERGY_EXPORT_RETENTION_DAYS = envint("VIGIL_ENERGY_EXPORT_RETENTION_DAYS", "30", minimum=1)
VIGIL_ALERTS_NOTIFICATION_RETENTION_DAYS = envint(
    "VIGIL_ALERTS_NOTIFICATION_RETENTION_DAYS", "90", minimum=1
)
# Ingest refusals (the admin's refused batches); /metrics keeps counting them by reason.
VIGIL_REFUSALS_RETENTION_DAYS = envint("VIGIL_REFUSALS_RETENTION_DAYS", "90", minimum=1)
# How long a closed month's energy report stays cached (its key changes with its rollups and
# carbon inputs; this bounds what the key does not follow, such as a job moved to another team).
VIGIL_ENERGY_REPORT_CACHE_S = envint("VIGIL_ENERGY_REPORT_CACHE_S", "3600", minimum=0)
# Raw GPU samples older than this many hours are packed, one row per GPU and hour, at about a
# sixth of their size (webapp/telemetry/compaction.py). Above the 3 h a job page reads raw
# samples for and the node page's last hour, so live pages read only raw rows.
VIGIL_COMPACT_AFTER_HOURS = envint("VIGIL_COMPACT_AFTER_HOURS", "6", minimum=2)
VIGIL_PARTITIONS_AHEAD_DAYS = envint("VIGIL_PARTITIONS_AHEAD_DAYS", "3", minimum=1)
# A sample stamped further in the future than this is refused (clock skew on a node).
VIGIL_MAX_FUTURE_SKEW_S = envfloat("VIGIL_MAX_FUTURE_SKEW_S", "300", minimum=0)
# Keys for the unauthenticated-by-login endpoints. Empty means: open in debug, closed otherwise.
VIGIL_METRICS_KEY = env("VIGIL_METRICS_KEY")
VIGIL_HEALTH_KEY = env("VIGIL_HEALTH_KEY")
# A GPU counts as busy at or above this utilization (%), as in the paper's Figure 6 reading.
VIGIL_BUSY_UTIL_PCT = envfloat("VIGIL_BUSY_UTIL_PCT", "10", minimum=0)
# A node not heard from for this long is shown as stale.
VIGIL_STALE_AFTER_S = envint("VIGIL_STALE_AFTER_S", "120", minimum=1)
# Largest body POST /api/v1/job-events reads (bytes); a larger one is refused with 413 before
# it is read. 1 MiB holds thousands of job events (one is a few hundred bytes), far more than
# a scheduler sends per interval.
VIGIL_API_MAX_BODY_BYTES = envint("VIGIL_API_MAX_BODY_BYTES", str(2**20), minimum=1024)

# --- Failure diagnosis ---------------------------------------------------------------------
# Optional LLM hook (webapp/failures/llm.py), off when the URL is empty: an OpenAI-compatible
# chat completions endpoint, asked only about failures no rule explains.
VIGIL_LLM_URL = env("VIGIL_LLM_URL")
VIGIL_LLM_MODEL = env("VIGIL_LLM_MODEL", "default")
VIGIL_LLM_API_KEY = env("VIGIL_LLM_API_KEY")
# Circuit breaker: automatic restarts of one job in a row before Vigil only notifies
# (docs/failure-taxonomy.md: 3).
VIGIL_MAX_AUTO_RESTARTS = envint("VIGIL_MAX_AUTO_RESTARTS", "3", minimum=0)
# --- Recovery ------------------------------------------------------------------------------
# Where the recovery worker writes health-check output and resubmission scripts. A health
# check's output is written by the check job on the cluster's nodes, so on a real cluster this
# folder must be on a filesystem the nodes and the recovery worker share.
VIGIL_RECOVERY_WORKDIR = env("VIGIL_RECOVERY_WORKDIR", str(BASE_DIR / ".vigil" / "recovery"))
# Folder of the Slurm tools (scontrol, sbatch, sinfo, squeue) when they are not on PATH.
VIGIL_SLURM_BIN_DIR = env("VIGIL_SLURM_BIN_DIR")
VIGIL_KUBECTL = env("VIGIL_KUBECTL", "kubectl")
# The Slurm user the recovery worker runs as: the only user of the maintenance reservation a
# drained node is health-checked in before it returns to service.
VIGIL_SLURM_USER = env("VIGIL_SLURM_USER") or getpass.getuser()
# The node health check locate_restart and "return to service" submit (deploy/healthcheck/:
# the paper's two-round pairwise NCCL test by default; dcgm_diag.sh is the other one shipped).
# Empty or unset: that default. "none": no check (return to service resumes at once), said
# in so many words, since an empty line in .env must not turn a safety check off.
VIGIL_HEALTHCHECK_SCRIPT = env(
    "VIGIL_HEALTHCHECK_SCRIPT", str(BASE_DIR / "deploy" / "healthcheck" / "nccl_pairwise.py")
)
if VIGIL_HEALTHCHECK_SCRIPT.lower() == "none":
    VIGIL_HEALTHCHECK_SCRIPT = ""
VIGIL_HEALTHCHECK_ARGS = env("VIGIL_HEALTHCHECK_ARGS")
VIGIL_HEALTHCHECK_TIMEOUT_S = envint("VIGIL_HEALTHCHECK_TIMEOUT_S", "600", minimum=10)
# A scheduler command that has not answered in this long failed (transiently: slurmctld busy
# or restarting; Slurm's own MessageTimeout default is 10 s). A worker holds a claimed action
# for its command's timeout plus the grace; a worker that died is replaced after that.
# Transient scheduler errors are retried this many times in all.
VIGIL_SCHEDULER_TIMEOUT_S = envint("VIGIL_SCHEDULER_TIMEOUT_S", "60", minimum=1)
VIGIL_RECOVERY_LEASE_GRACE_S = envint("VIGIL_RECOVERY_LEASE_GRACE_S", "30", minimum=1)
# Seconds a job failure's actions wait for the log lines of its nodes before they run: an agent
# sends them once per interval (collectors: --interval, 10 s by default), and a diagnosis made
# before they came would act on a guess. A GPU error (its Xid is the evidence) does not wait.
VIGIL_RECOVERY_SETTLE_S = envfloat("VIGIL_RECOVERY_SETTLE_S", "12", minimum=0)
# First delay of `retry` (a transient auxiliary service), doubled per restart, capped at 10 min.
VIGIL_RECOVERY_RETRY_BASE_S = envfloat("VIGIL_RECOVERY_RETRY_BASE_S", "30", minimum=0)
VIGIL_RECOVERY_MAX_ATTEMPTS = envint("VIGIL_RECOVERY_MAX_ATTEMPTS", "6", minimum=1)
# Vigil drains, resets and requeues only for a failure detected within this many seconds of
# happening; one detected later (a spool replayed after an outage, a history backfill, a late
# report) gets a plan that only tells people: by then the job may have ended or been restarted
# by hand and the node repaired, so acting on the old record could hit the wrong run or a
# healthy node. 600 s is the bound past which the pages call a failure replayed
# (webapp/failures/reliability.py LIVE_DETECTION_MAX): the live path takes seconds to a minute.
VIGIL_RECOVERY_ACT_WITHIN_S = envint("VIGIL_RECOVERY_ACT_WITHIN_S", "600", minimum=1)
# --- Evaluation scheduling -----------------------------------------------------------------
# Folders evaluation checkpoints may be read from (a request naming a path outside them, or
# one that does not exist, is refused). On a real cluster: the shared model storage.
VIGIL_EVAL_MODEL_ROOTS = envlist("VIGIL_EVAL_MODEL_ROOTS") or [str(BASE_DIR / ".vigil" / "models")]
# The evaluation program every evaluation job runs, with its phase and datasets as options
# (README "Evaluation scheduling" has the contract). Empty: evaluations cannot be requested.
VIGIL_EVAL_PROGRAM = env("VIGIL_EVAL_PROGRAM")
# Where job scripts, outputs and phase reports go: shared by the nodes and the worker.
VIGIL_EVAL_WORKDIR = env("VIGIL_EVAL_WORKDIR", str(BASE_DIR / ".vigil" / "evaluation"))
# How often the worker looks at a running evaluation's jobs (in the jobs app, which the Slurm
# watcher updates every agent interval: 10 s by default).
VIGIL_EVAL_TRACK_S = envfloat("VIGIL_EVAL_TRACK_S", "10", minimum=0.1)
# A GPU under 0.8x its job's median this many minutes in a row is a straggler (the ratio and
# its source: webapp/failures/stragglers.py).
VIGIL_STRAGGLER_MINUTES = envint("VIGIL_STRAGGLER_MINUTES", "10", minimum=1)
# Seconds a checkpoint save stalls training (delta of the Young/Daly interval) when the
# reliability page is not given one: docs/failure-signatures.md section 9's worked example, 60 s.
VIGIL_CHECKPOINT_WRITE_S = envfloat("VIGIL_CHECKPOINT_WRITE_S", "60", minimum=0)
if VIGIL_CHECKPOINT_WRITE_S == 0:
    raise ImproperlyConfigured("VIGIL_CHECKPOINT_WRITE_S=0 is not a duration (use seconds > 0)")

# --- Alerts --------------------------------------------------------------------------------
# Links in emails point here (no trailing slash); the unsubscribe link too.
# Outside debug it must be set: the local default would have every production email link to
# the recipient's own machine.
if _serving and not env("VIGIL_BASE_URL"):
    raise ImproperlyConfigured(
        "VIGIL_BASE_URL must be set when VIGIL_DEBUG=false: it is the address emails link to "
        "(e.g. https://vigil.example.org); the default, http://127.0.0.1:8000, is for "
        "development only"
    )
VIGIL_BASE_URL = env("VIGIL_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
if urlsplit(VIGIL_BASE_URL).scheme not in ("http", "https") or not urlsplit(VIGIL_BASE_URL).netloc:
    raise ImproperlyConfigured(
        f"VIGIL_BASE_URL={VIGIL_BASE_URL!r} is not an http(s):// URL "
        "(e.g. https://vigil.example.org)"
    )
# The right-hand side of every email's Message-ID (RFC 5322 section 3.6.4: a domain the sender
# owns); defaults to the host of VIGIL_BASE_URL.
VIGIL_EMAIL_DOMAIN = env("VIGIL_EMAIL_DOMAIN") or (urlsplit(VIGIL_BASE_URL).hostname or "localhost")
# Per recipient (channel): at most this many notifications in any hour; the rest are recorded
# as skipped (an incident of a hundred nodes must not send a hundred emails to one person).
VIGIL_ALERTS_RATE_LIMIT_PER_HOUR = envint("VIGIL_ALERTS_RATE_LIMIT_PER_HOUR", "30", minimum=1)
# One send (connect, TLS, every SMTP step or the whole HTTP exchange) ends by this total
# deadline (alerts/transports.py Deadline). A worker holds a claimed notification for the
# lease; after it, the sweep hands the row to another worker (the first one died). A send
# still running then would be sent twice, so the deadline is at most half the lease (the
# rest: the claim before and the UPDATE after).
VIGIL_ALERTS_SEND_TIMEOUT_S = envint("VIGIL_ALERTS_SEND_TIMEOUT_S", "20", minimum=1)
VIGIL_ALERTS_LEASE_S = envint("VIGIL_ALERTS_LEASE_S", "60", minimum=2)
if VIGIL_ALERTS_SEND_TIMEOUT_S * 2 > VIGIL_ALERTS_LEASE_S:
    raise ImproperlyConfigured(
        f"VIGIL_ALERTS_SEND_TIMEOUT_S={VIGIL_ALERTS_SEND_TIMEOUT_S} must be at most half of "
        f"VIGIL_ALERTS_LEASE_S={VIGIL_ALERTS_LEASE_S}: a send still running when its claim "
        "runs out is claimed and sent again by another worker"
    )
# Transient delivery errors are retried this many times in all (backoff 2, 4, 8 ... s).
VIGIL_ALERTS_MAX_ATTEMPTS = envint("VIGIL_ALERTS_MAX_ATTEMPTS", "8", minimum=1)
# The default HMAC-SHA256 key of webhook channels (a channel may name its own environment
# variable in its config, "secret_env"). Only ever read from the environment, never logged.
VIGIL_WEBHOOK_SECRET = env("VIGIL_WEBHOOK_SECRET")
# Tests only: seconds a worker sleeps after claiming a notification and before sending it,
# so a test can kill it in that window. 0 in every real deployment.
VIGIL_ALERTS_TEST_PAUSE_BEFORE_SEND_S = envfloat(
    "VIGIL_ALERTS_TEST_PAUSE_BEFORE_SEND_S", "0", minimum=0
)

# --- Energy accounting and the monthly report (webapp/energy) ---------------------------------
# The energy rollup refresh looks this many hours back for GPU-hours that got new samples (a
# spool replayed later than this is folded in by `manage.py energy_report --rebuild`).
VIGIL_ENERGY_LOOKBACK_H = envint("VIGIL_ENERGY_LOOKBACK_H", "48", minimum=1)
# The managers' monthly report is emailed on this day of the month, at this hour, in each
# recipient's timezone (EnergyReportSubscription.timezone; default TIME_ZONE).
VIGIL_ENERGY_REPORT_DAY = envint("VIGIL_ENERGY_REPORT_DAY", "1", minimum=1)
VIGIL_ENERGY_REPORT_HOUR = envint("VIGIL_ENERGY_REPORT_HOUR", "6", minimum=0)
if VIGIL_ENERGY_REPORT_DAY > 28 or VIGIL_ENERGY_REPORT_HOUR > 23:
    raise ImproperlyConfigured(
        "VIGIL_ENERGY_REPORT_DAY must be 1-28 (every month has it) and VIGIL_ENERGY_REPORT_HOUR 0-23"
    )
# Electricity tariff for the report's cost line, per kWh of facility energy; 0 = not shown.
VIGIL_ENERGY_TARIFF_PER_KWH = envfloat("VIGIL_ENERGY_TARIFF_PER_KWH", "0", minimum=0)
VIGIL_ENERGY_CURRENCY = env("VIGIL_ENERGY_CURRENCY", "EUR")
# Headless Chromium that prints the monthly report to PDF (Debian's package by default).
VIGIL_CHROMIUM = env("VIGIL_CHROMIUM", "/usr/bin/chromium")
