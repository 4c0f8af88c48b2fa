"""Endpoints outside the login (health, metrics) are guarded by their own bearer key.

The key is sent as `Authorization: Bearer <key>`, and only there: a key in the query string
(`?key=`) ends up in proxy and access logs, so it is never read. With no key configured an
endpoint is open in debug and closed otherwise, so production never exposes it by accident.

Requests refused for a missing or wrong credential (here and at the job-events API) are
counted in the shared cache, not stored as rows: anyone can send them, and a table of them
would be a way to fill the database. `/metrics` shows the count.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, JsonResponse
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("vigil.auth")

UNAUTHENTICATED_KEY = "vigil:unauthenticated_requests"


def bearer_token(request: HttpRequest) -> str:
    """The credential of `Authorization: Bearer <token>`, or "" when there is none."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def unauthenticated_count() -> None:
    """Count one request refused for its credential (shared by every web process)."""
    try:
        cache.add(UNAUTHENTICATED_KEY, 0, timeout=None)
        cache.incr(UNAUTHENTICATED_KEY)
    except Exception:  # the refusal stands even when the cache is down; only the count is lost
        log.warning("could not count an unauthenticated request", exc_info=True)


def unauthenticated_total() -> int:
    return int(cache.get(UNAUTHENTICATED_KEY) or 0)


class UnauthenticatedCollector(Collector):
    def collect(self) -> Iterator:
        try:
            total = unauthenticated_total()
        except Exception:  # a cache outage must not take /metrics down: leave the series out
            log.warning("unauthenticated request count unavailable", exc_info=True)
            return
        yield CounterMetricFamily(
            "vigil_api_unauthenticated_requests",
            "Requests to bearer-authenticated endpoints refused for a missing or wrong "
            "credential (since the cache was last cleared)",
            value=total,
        )


def key_refusal(request: HttpRequest, key: str, setting: str) -> JsonResponse | None:
    """None if the request may pass; otherwise the 401/403 answer naming the problem."""
    if not key and not settings.DEBUG:
        return JsonResponse(
            {"error": f"{setting} is not set; this endpoint is closed outside debug"}, status=403
        )
    if key and not hmac.compare_digest(bearer_token(request).encode(), key.encode()):
        unauthenticated_count()
        response = JsonResponse(
            {"error": f"missing or wrong key ({setting}): send 'Authorization: Bearer <key>'"},
            status=401,
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    return None
