"""Scheduler node states on the wire (`JobEventBatch.node_states`), as a worker meets them."""

from __future__ import annotations

import json
import time

import pytest

from collectors import schema
from collectors.schema import BatchError, parse_job_events

NOW = time.time()


def _batch(*states: dict, **overrides) -> str:
    batch = {
        "v": 1,
        "batch_id": "3f2c3f0e-6a57-4a43-9d6c-2f9f3a0b8a13",
        "cluster": "c1",
        "node": "slurm-ctl",
        "token": "a-node-token-of-enough-length-0123",
        "sent_at": NOW,
        "node_states": list(states),
        **overrides,
    }
    return json.dumps(batch)


def _state(node: str = "gpu-01", **fields) -> dict:
    return {
        "node": node,
        "state": "drained",
        "reason": "vigil: xid 79",
        "since": NOW - 60,
        **fields,
    }


def test_a_batch_of_node_states_alone_is_valid():
    batch = parse_job_events(_batch(_state(), _state("gpu-02", state="up", reason="")))
    assert batch.events == []
    assert [(s.node, s.state, s.reason) for s in batch.node_states] == [
        ("gpu-01", "drained", "vigil: xid 79"),
        ("gpu-02", "up", ""),
    ]
    no_reason = {"node": "gpu-03", "state": "down", "since": NOW}
    assert parse_job_events(_batch(no_reason)).node_states[0].reason == ""
    assert parse_job_events(_batch()).node_states == []


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"state": "idle"}, "node_states.1.state: Input should be 'up', 'draining', 'drained'"),
        ({"state": "DRAINED"}, "node_states.1.state: Input should be"),
        ({"reason": "x" * 257}, "node_states.1.reason: String should have at most 256"),
        ({"node": ""}, "node_states.1.node: String should have at least 1"),
        ({"node": "n" * 129}, "node_states.1.node: String should have at most 128"),
        ({"since": 5}, "node_states.1.since: Input should be greater than 1000000000"),
        ({"since": None}, "node_states.1.since: Input should be a valid number"),
        ({"reason": "bad\x00reason"}, "node_states.1.reason: contains a NUL byte"),
        ({"cordoned": True}, "node_states.1.cordoned: Extra inputs are not permitted"),
    ],
)
def test_a_bad_node_state_refuses_the_batch_naming_the_field(change, needle):
    with pytest.raises(BatchError) as exc:
        parse_job_events(_batch(_state(), _state("gpu-02") | change))
    assert exc.value.reason == "malformed"
    assert exc.value.detail.startswith(needle)


def test_the_same_node_twice_is_refused():
    with pytest.raises(BatchError, match=r"node_states\[1\]: node 'gpu-01' is listed twice"):
        parse_job_events(_batch(_state(), _state(state="up")))


def test_a_node_state_from_the_future_is_refused():
    with pytest.raises(BatchError) as exc:
        parse_job_events(_batch(_state(), _state("gpu-02", since=NOW + 3600)), now=NOW)
    assert exc.value.reason == "future_timestamp"
    assert exc.value.detail.startswith("node_states[1]: timestamp")


def test_node_states_are_bounded():
    limit = schema.MAX_NODE_STATES_PER_BATCH
    states = [_state(f"n{i}") for i in range(limit + 1)]
    with pytest.raises(BatchError) as exc:
        parse_job_events(_batch(*states))
    assert exc.value.detail.startswith(f"node_states: List should have at most {limit} items")
    assert len(parse_job_events(_batch(*states[:limit])).node_states) == limit
