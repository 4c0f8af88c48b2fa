"""The failures timeline's cluster is a choice: a cluster Vigil does not know is refused with
the field named (page and CSV), not answered with an empty timeline that reads as "no
failures"."""

from __future__ import annotations

from webapp.fleet.models import Cluster


def test_an_unknown_cluster_is_refused_and_a_known_one_offered(operator_client, db):
    Cluster.objects.create(name="kestrel")
    page = operator_client.get("/failures/?cluster=kestrel")
    assert page.status_code == 200
    assert "<option selected>kestrel</option>" in page.content.decode()
    wrong = operator_client.get("/failures/?cluster=kestrl")
    assert wrong.status_code == 400 and "unknown cluster" in wrong.content.decode()
    csv = operator_client.get("/api/v1/failures.csv?cluster=kestrl")
    assert csv.status_code == 400 and b"cluster: unknown cluster" in csv.content
