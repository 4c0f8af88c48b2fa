"""Moving a model between apps must not lose its rows on upgrade."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from webapp.core.models import RejectedBatch


@pytest.mark.django_db(transaction=True)
def test_refused_batches_stored_before_the_move_to_core_are_kept():
    executor = MigrationExecutor(connection)
    before = [("telemetry", "0003_rollup_dirty"), ("core", None)]
    executor.migrate(before)
    old = executor.loader.project_state(before[0]).apps.get_model("telemetry", "RejectedBatch")
    old.objects.create(reason="bad_token", detail="wrong token", cluster="c", node="n")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    kept = RejectedBatch.objects.get()
    assert (kept.reason, kept.detail, kept.cluster, kept.node) == (
        "bad_token",
        "wrong token",
        "c",
        "n",
    )
