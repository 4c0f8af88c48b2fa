"""A CSV export with a filter it cannot honour answers 400 naming the field, as its page does,
instead of a file of some other window (`?days=-5` gave every failure of the default 30 days)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from webapp.fleet.services import node_token_issue


@pytest.fixture
def cluster(db):
    node_token_issue("csvc", "gpu-c-01")


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("failures_api:timeline_csv", []),
        ("failures_api:reliability_csv", ["summary"]),
        ("failures_api:reliability_csv", ["nodes"]),
        ("recovery_api:summary_csv", []),
        ("recovery_api:over_time_csv", []),
        ("recovery_api:plans_csv", []),
        ("recovery_api:actions_csv", []),
    ],
)
def test_a_csv_refuses_days_it_cannot_honour(operator_client, cluster, name, args):
    url = reverse(name, args=args)
    for days, says in (("-5", "days: must be between 1 and"), ("x", "days: 'x' is not a whole")):
        response = operator_client.get(url, {"days": days})
        assert response.status_code == 400, (url, days)
        assert says in response.content.decode(), (url, days)
    if name != "failures_api:timeline_csv":  # the timeline's cluster is a free-text filter
        response = operator_client.get(url, {"cluster": "nope"})
        assert response.status_code == 400 and "cluster: unknown cluster 'nope'" in (
            response.content.decode()
        )
    assert operator_client.get(url, {"days": "7"}).status_code == 200
