"""The circuit breaker (failure-taxonomy.md): recovery policy over a diagnosed failure.

The diagnosis proposes an action; the breaker turns a restart into a cordon when the same
cause hit the same node within 24 h, into a notification when it hit other nodes (software,
not hardware) or when the job was already restarted automatically too often in a row.
Its own module so that it can move to the recovery app with the rest of the policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings

from webapp.failures import taxonomy
from webapp.failures.models import FailureEvent

# Same cause twice within 24 h (failure-taxonomy.md); at most settings.VIGIL_MAX_AUTO_RESTARTS
# (default 3) automatic restarts of one job in a row.
BREAKER_WINDOW = timedelta(hours=24)
RESTARTING = (taxonomy.Action.RESTART.value, taxonomy.Action.RETRY.value)
AUTO_RESTART_ACTIONS = (
    taxonomy.Action.RESTART.value,
    taxonomy.Action.RETRY.value,
    taxonomy.Action.CORDON_RESTART.value,
    taxonomy.Action.LOCATE_RESTART.value,
    taxonomy.Action.ROLLBACK_SKIP.value,
)


def breaker_apply(
    action: str,
    node: str | None,
    same_cause_nodes: Sequence[str | None],
    restarts_in_a_row: int = 0,
    max_restarts: int = 3,
) -> tuple[str, str]:
    """The circuit breaker of failure-taxonomy.md over plain data: (action, why or "").

    `same_cause_nodes`: blamed nodes of the earlier failures with this cause within 24 h.
    """
    if action in RESTARTING and node and node in same_cause_nodes:
        return (
            taxonomy.Action.CORDON_RESTART.value,
            f"same cause on {node} twice within 24 h: cordon the node",
        )
    others = sorted({n for n in same_cause_nodes if n and n != node})
    if action in RESTARTING and others:
        return (
            taxonomy.Action.NOTIFY.value,
            "same cause on other nodes within 24 h (" + ", ".join(others[:5]) + "): "
            "points to software, no automatic restart",
        )
    if action in AUTO_RESTART_ACTIONS and restarts_in_a_row >= max_restarts:
        return (
            taxonomy.Action.NOTIFY.value,
            f"already restarted automatically {restarts_in_a_row} times in a row",
        )
    return action, ""


def breaker_decide(failure: FailureEvent, action: str) -> tuple[str, str]:
    """The breaker over the failures on record before `failure`: (action, why or "")."""
    since = failure.occurred_at - BREAKER_WINDOW
    earlier = FailureEvent.objects.filter(
        cause=failure.cause,
        cluster_id=failure.cluster_id,
        occurred_at__gte=since,
        occurred_at__lt=failure.occurred_at,
    ).exclude(pk=failure.pk)
    # A job failure and the GPU error that caused it are one incident, not a repeat.
    earlier = earlier.filter(kind=failure.kind)
    nodes = list(earlier.values_list("blamed_host", flat=True))
    in_a_row = 0
    if failure.job_id:
        for act in (
            FailureEvent.objects.filter(job_id=failure.job_id, occurred_at__lt=failure.occurred_at)
            .order_by("-occurred_at")
            .values_list("action", flat=True)
        ):
            if act not in AUTO_RESTART_ACTIONS:
                break
            in_a_row += 1
    return breaker_apply(
        action, failure.blamed_host or None, nodes, in_a_row, settings.VIGIL_MAX_AUTO_RESTARTS
    )
