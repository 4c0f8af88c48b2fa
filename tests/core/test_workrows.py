"""The leased work-row helper (webapp/core/workrows.py) on a real table in PostgreSQL: an
energy export, claimed as its build task claims it."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from webapp.core import workrows
from webapp.energy.exports import EXPORT_LEASE
from webapp.energy.models import EnergyExport
from webapp.fleet.models import Cluster

# The same table with a retry status, so a transient failure waits out its backoff there.
RETRYING = workrows.LeaseSpec(
    EnergyExport,
    claimable=(EnergyExport.Status.PENDING,),
    running=EnergyExport.Status.RUNNING,
    retry=EnergyExport.Status.FAILED,
)


def _export() -> EnergyExport:
    cluster, _ = Cluster.objects.get_or_create(name="workrows")
    return EnergyExport.objects.create(cluster=cluster, month="2026-01")


def test_two_workers_claiming_one_row_at_once_get_it_once(transactional_db):
    """The second claim waits on the first's uncommitted UPDATE, then finds the row taken."""
    export = _export()
    got: dict[str, bool] = {}

    def second() -> None:
        try:
            got["b"] = workrows.claim(EXPORT_LEASE, export.pk, "worker-b", 60)
        finally:
            connection.close()

    with transaction.atomic():
        got["a"] = workrows.claim(EXPORT_LEASE, export.pk, "worker-a", 60)
        other = threading.Thread(target=second)
        other.start()  # blocks on worker-a's row lock until this transaction commits
    other.join(timeout=30)
    assert not other.is_alive()
    assert got == {"a": True, "b": False}
    row = EnergyExport.objects.get(pk=export.pk)
    assert (row.status, row.claimed_by, row.attempts) == ("running", "worker-a", 1)
    held = workrows.not_claimed(EXPORT_LEASE, row)
    assert held.status == "held" and 59 < held.retry_in_s <= 61


@pytest.mark.django_db
def test_a_row_whose_worker_died_is_claimed_again_once_its_lease_runs_out():
    export = _export()
    now = timezone.now()
    assert workrows.claim(EXPORT_LEASE, export.pk, "died", 60, now=now)
    assert not workrows.claim(EXPORT_LEASE, export.pk, "next", 60, now=now + timedelta(seconds=59))
    lost = EnergyExport.objects.filter(EXPORT_LEASE.lost_q(now + timedelta(seconds=61)))
    assert list(lost) == [export]
    assert workrows.claim(EXPORT_LEASE, export.pk, "next", 60, now=now + timedelta(seconds=61))
    row = EnergyExport.objects.get(pk=export.pk)
    assert (row.claimed_by, row.attempts) == ("next", 2)
    # Finished once: a late worker that lost its lease writes nothing over it.
    assert workrows.finish(EXPORT_LEASE, export.pk, "done", if_running=True) == 1
    assert workrows.finish(EXPORT_LEASE, export.pk, "failed", if_running=True) == 0
    row.refresh_from_db()
    assert (row.status, row.lease_until) == ("done", None)


@pytest.mark.django_db
def test_a_transient_failure_waits_its_backoff_then_is_claimed_again():
    export = _export()
    assert [workrows.backoff_s(n) for n in (1, 2, 3, 8, 9, 20)] == [2, 4, 8, 256, 300, 300]
    assert workrows.claim(RETRYING, export.pk, "w", 60)
    assert workrows.retry_later(RETRYING, export.pk, workrows.backoff_s(1), error="busy") == 1
    row = EnergyExport.objects.get(pk=export.pk)
    assert (row.status, row.error) == ("failed", "busy")
    waiting = workrows.not_claimed(RETRYING, row)
    assert waiting.status == "failed" and 1 < waiting.retry_in_s <= 2
    now = timezone.now()
    assert not workrows.claim(RETRYING, export.pk, "w", 60, now=now)
    assert workrows.claim(RETRYING, export.pk, "w", 60, now=now + timedelta(seconds=3))
    assert EnergyExport.objects.get(pk=export.pk).attempts == 2


def test_a_spec_without_a_claimable_status_is_refused():
    with pytest.raises(ValueError, match="EnergyExport: a lease spec needs a claimable status"):
        workrows.LeaseSpec(EnergyExport, claimable=(), running="running")
