"""Reads of the inventory: what state a node is in."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from webapp.fleet.choices import NodeState


def node_state_now(state: str, last_seen: datetime | None, now: datetime) -> str:
    """The state to show: an up node silent for VIGIL_STALE_AFTER_S is stale already.

    The stored state turns stale only when the periodic `mark_stale_nodes` task runs (every
    30 s, and not at all without a beat); the page must not call a silent node up meanwhile.
    """
    stale_before = now - timedelta(seconds=settings.VIGIL_STALE_AFTER_S)
    if state == NodeState.UP and (last_seen is None or last_seen < stale_before):
        return NodeState.STALE
    return state
