"""JSON API of the jobs app: job events from any scheduler (`POST /api/v1/job-events`).

The body is a job-event batch (collectors/schema.py `JobEventBatch`) without its `token`: the
token travels in `Authorization: Bearer <node token>`, issued per node or per scheduler
(`manage.py issue_node_token --cluster C scheduler-k8s`). `v`, `batch_id`, `sent_at` and
`source` may be left out. Batches are small and applied synchronously by the same service as
the Celery task, so the answer says what was stored.
"""

from __future__ import annotations

import json
import time
import uuid

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from collectors.schema import BatchError
from webapp.core.refusals import AuthError, batch_reject
from webapp.jobs.services import job_events_ingest


def _error(status: int, message: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


@csrf_exempt  # machine-to-machine; authenticated by the bearer token, not a session
@login_not_required
def job_events(request: HttpRequest) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, f"method: {request.method} not allowed, use POST")
        response["Allow"] = "POST"
        return response
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return _error(401, "Authorization: expected 'Bearer <node token>'")
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"body: malformed JSON ({exc})")
    if not isinstance(body, dict):
        return _error(400, "body: expected a JSON object (a job-event batch)")
    if "token" in body:
        return _error(422, "token: send the token in the Authorization header, not the body")
    body.setdefault("v", 1)
    body.setdefault("batch_id", str(uuid.uuid4()))
    body.setdefault("sent_at", time.time())
    body.setdefault("source", "http")
    raw = json.dumps({**body, "token": token})
    try:
        result = job_events_ingest(raw)
    except AuthError as exc:
        batch_reject(raw, exc)
        return _error(401, f"Authorization: {exc.detail}")
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
