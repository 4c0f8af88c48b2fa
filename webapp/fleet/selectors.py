"""Reads of the inventory: what state a node is in."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from webapp.fleet.choices import NodeState


def node_state_now(
    state: str, last_seen: datetime | None, now: datetime, *, runs_jobs: bool = False
) -> str:
    """The state to show: an up node silent for VIGIL_STALE_AFTER_S is stale already, and a
    drained node that still runs a job (`runs_jobs`, as the caller's allocations say) is
    draining.

    The stored state turns stale only when the periodic `mark_stale_nodes` task runs (every
    30 s, and not at all without a beat); the page must not call a silent node up meanwhile.
    Slurm calls a node with the DRAIN flag "draining" while jobs are allocated on it and
    "drained" once none is (https://slurm.schedmd.com/sinfo.html#SECTION_NODE-STATE-CODES); a
    drain recorded at once (Vigil's simulated executor) or a watcher's report older than the
    job's start must not tell an operator the node is empty. Only this way round: a draining
    node whose jobs Vigil does not know of is left draining.
    """
    stale_before = now - timedelta(seconds=settings.VIGIL_STALE_AFTER_S)
    if state == NodeState.UP and (last_seen is None or last_seen < stale_before):
        return NodeState.STALE
    if state == NodeState.DRAINED and runs_jobs:
        return NodeState.DRAINING
    return state
