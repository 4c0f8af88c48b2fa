"""`/healthz` for load balancers: is PostgreSQL answering, is the broker answering?

Not behind the login (a load balancer has no session) but behind its own key,
VIGIL_HEALTH_KEY, sent as `Authorization: Bearer <key>` (see webapp/core/keyauth.py).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from kombu import Connection

from webapp.core.keyauth import key_refusal

# A load balancer probes every few seconds; a check slower than this counts as down.
BROKER_TIMEOUT_S = 2.0


def _check_database() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchone()


def _check_broker() -> None:
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=BROKER_TIMEOUT_S) as conn:
        conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
        # Opening a channel makes the Redis transport PING the server.
        conn.default_channel  # noqa: B018


def _run(check) -> dict:
    started = time.perf_counter()
    try:
        check()
    except Exception as exc:  # any failure of a dependency is "down", reported by name
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}


@login_not_required
@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    refusal = key_refusal(request, settings.VIGIL_HEALTH_KEY, "VIGIL_HEALTH_KEY")
    if refusal is not None:
        return refusal
    checks = {"database": _run(_check_database), "broker": _run(_check_broker)}
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse(
        {"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503
    )
