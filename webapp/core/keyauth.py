"""Endpoints outside the login (health, metrics) are guarded by their own bearer key.

The key is sent as `Authorization: Bearer <key>` or `?key=<key>`. With no key configured an
endpoint is open in debug and closed otherwise, so production never exposes it by accident.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, JsonResponse


def presented_key(request: HttpRequest) -> str:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    return request.GET.get("key", "")


def key_refusal(request: HttpRequest, key: str, setting: str) -> JsonResponse | None:
    """None if the request may pass; otherwise the 401/403 answer naming the problem."""
    if not key and not settings.DEBUG:
        return JsonResponse(
            {"error": f"{setting} is not set; this endpoint is closed outside debug"}, status=403
        )
    if key and not hmac.compare_digest(presented_key(request).encode(), key.encode()):
        return JsonResponse({"error": f"missing or wrong key ({setting})"}, status=401)
    return None
