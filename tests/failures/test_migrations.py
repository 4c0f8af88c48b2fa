"""Moving what the engine read out of the failure row must keep it, both ways."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from webapp.failures.models import FailureEvent, FailureInputs

BEFORE = [("failures", "0002_alter_failureevent_cause_alter_proposedrule_cause")]
READ = {"streams": [["gpu-node-01:/logs/1.out:1", ["step 1", "NameError: x"]]], "notes": ["n"]}


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets or executor.loader.graph.leaf_nodes())
    return executor


@pytest.mark.django_db(transaction=True)
def test_inputs_stored_on_the_failure_row_move_to_their_table_and_back():
    executor = _migrate(BEFORE)
    old = executor.loader.project_state(BEFORE[0]).apps
    cluster = old.get_model("fleet", "Cluster").objects.create(name="c1")
    at = datetime(2026, 11, 1, 12, tzinfo=UTC)
    failure = old.get_model("failures", "FailureEvent")
    read = failure.objects.create(
        cluster=cluster, kind="job_failure", occurred_at=at, detected_at=at, inputs=READ
    )
    pending = failure.objects.create(
        cluster=cluster, kind="gpu_error", occurred_at=at, detected_at=at
    )

    _migrate(None)
    kept = FailureInputs.objects.get()
    assert (kept.failure_id, kept.data, kept.stored_at) == (read.pk, READ, at)
    assert FailureEvent.objects.filter(pk=pending.pk).exists()

    executor = _migrate(BEFORE)
    old = executor.loader.project_state(BEFORE[0]).apps.get_model("failures", "FailureEvent")
    assert old.objects.get(pk=read.pk).inputs == READ
    assert old.objects.get(pk=pending.pk).inputs == {}
    _migrate(None)
