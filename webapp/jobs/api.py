"""JSON API of the jobs app: job events from any scheduler (`POST /api/v1/job-events`).

The body is a job-event batch (collectors/schema.py `JobEventBatch`) without its `token`: the
token travels in `Authorization: Bearer <node token>`, issued per node or per scheduler
(`manage.py issue_node_token --cluster C scheduler-k8s`). `v`, `batch_id`, `sent_at`,
`source`, and `cluster` and `node` (the token says which node it is) may be left out.
Batches are small and applied synchronously by the same service as the Celery task, so the
answer says what was stored.

Anyone can reach this endpoint, so the order is: who is it (the token alone, before anything
is parsed), how big is it (refused before it is read), then what does it say. A request that
fails the first step writes no row (it is counted in `/metrics` instead); what an
authenticated node sends wrong is kept in the refusal log like any refused batch.
"""

from __future__ import annotations

import json
import time
import uuid

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from collectors.schema import BatchError
from webapp.core.keyauth import bearer_token, unauthenticated_count
from webapp.core.refusals import AuthError, batch_reject
from webapp.fleet.services import node_authenticate_bearer
from webapp.jobs.services import job_events_ingest

NO_TOKEN = "Authorization: expected 'Bearer <node token>'"
# One answer for an unknown node and a wrong token alike: it tells a guesser nothing.
BAD_TOKEN = "Authorization: unknown or wrong node token"


def _error(status: int, message: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


def _unauthenticated(message: str) -> JsonResponse:
    unauthenticated_count()
    return _error(401, message)


def _body(request: HttpRequest, limit: int) -> bytes | None:
    """The body, or None when it is over `limit` bytes; never reads more than limit + 1."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return None
    data = request.read(limit + 1)
    return None if len(data) > limit else data


@csrf_exempt  # machine-to-machine; authenticated by the bearer token, not a session
@login_not_required
def job_events(request: HttpRequest) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, f"method: {request.method} not allowed, use POST")
        response["Allow"] = "POST"
        return response
    token = bearer_token(request)
    if not token:
        return _unauthenticated(NO_TOKEN)
    try:
        cluster, node = node_authenticate_bearer(token)
    except AuthError:
        return _unauthenticated(BAD_TOKEN)

    limit = settings.VIGIL_API_MAX_BODY_BYTES
    data = _body(request, limit)
    if data is None:
        return _error(413, f"body: larger than {limit} bytes (VIGIL_API_MAX_BODY_BYTES)")
    try:
        body = json.loads(data)
    except RecursionError:
        return _error(400, "body: nested too deeply")
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"body: malformed JSON ({exc})")
    if not isinstance(body, dict):
        return _error(400, "body: expected a JSON object (a job-event batch)")
    if "token" in body:
        return _error(422, "token: send the token in the Authorization header, not the body")
    named = (body.setdefault("cluster", cluster), body.setdefault("node", node))
    if named != (cluster, node):
        return _error(
            403,
            f"cluster/node: the body names {named[0]!s:.64}/{named[1]!s:.64}, "
            f"the token is {cluster}/{node}'s",
        )
    body.setdefault("v", 1)
    body.setdefault("batch_id", str(uuid.uuid4()))
    body.setdefault("sent_at", time.time())
    body.setdefault("source", "http")
    try:
        raw = json.dumps({**body, "token": token})
        result = job_events_ingest(raw)
    except RecursionError:
        return _error(400, "body: nested too deeply")
    except AuthError as exc:
        if exc.reason == "not_scheduler":  # known, but not allowed to send job events
            batch_reject(raw, exc)
            return _error(403, f"Authorization: {exc.detail}")
        # The token was rotated between the two checks: still nobody we know.
        return _unauthenticated(BAD_TOKEN)
    except BatchError as exc:
        batch_reject(raw, exc)
        return _error(422, exc.detail)
    return JsonResponse(
        {
            "batch_id": result.batch_id,
            "accepted": result.events,
            "new": result.applied,
            "duplicates": result.duplicates,
            "jobs": result.jobs,
        },
        status=202,
    )
