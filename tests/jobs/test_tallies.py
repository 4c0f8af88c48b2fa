"""Job tallies: PostgreSQL's arithmetic reproduced, the triggers keeping every cluster's tally
equal to counting its jobs (inserts, updates, deletes, truncation), compaction, repair."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.db import connection

from tests.jobs.helpers import assert_tallies_match_jobs, make_jobs
from webapp.core.windows import Window
from webapp.fleet.models import Cluster
from webapp.jobs import services
from webapp.jobs.characterization import cluster_tally, jobs_characterize, window_tally
from webapp.jobs.models import Job, JobTally
from webapp.jobs.services import job_tallies_compact, job_tallies_rebuild
from webapp.jobs.tallies import epoch_s


@pytest.fixture
def acme(db) -> Cluster:
    return Cluster.objects.create(name="acme")


def test_epoch_s_is_postgresql_date_part_to_the_last_bit(db):
    rng = np.random.default_rng(1)
    a = rng.integers(7 * 10**14, 8 * 10**14, 4000)
    span = np.concatenate(
        [rng.integers(0, 10**6, 1000), rng.integers(0, 10**12, 1000)]
        + [rng.integers(0, 10**13, 1000), rng.integers(0, 10**9, 1000) * 1_000_000]
    )
    with connection.cursor() as cur:
        cur.execute(
            "SELECT date_part('epoch', (t + b * interval '1 microsecond') "
            "- (t + a * interval '1 microsecond')) "
            "FROM unnest(%s::int8[], %s::int8[]) AS x(a, b), "
            "(SELECT timestamptz '2000-01-01 00:00:00+00' AS t) y",
            [a.tolist(), (a + span).tolist()],
        )
        want = np.array([r[0] for r in cur.fetchall()])
    assert np.array_equal(epoch_s(span), want)  # not (b - a) / 1e6: days are apart
    assert [epoch_s(int(s)) for s in span[::97]] == want[::97].tolist()


def test_triggers_keep_the_tally_through_inserts_updates_and_deletes(acme):
    jobs = make_jobs(acme, 300)  # bulk_create: the insert trigger, a row per job
    other = Cluster.objects.create(name="other")
    make_jobs(other, 20, seed=2)
    assert_tallies_match_jobs(acme)
    assert_tallies_match_jobs(other)

    # A job ends (save), a batch of jobs is requeued (QuerySet.update), one is deleted.
    running = next(j for j in jobs if j.state == "running")
    running.state, running.end_at = "failed", running.start_at + timedelta(hours=30)
    running.save()
    Job.objects.filter(cluster=acme, state="completed", job_type="eval").update(
        state="pending", start_at=None, end_at=None
    )
    Job.objects.filter(id=jobs[5].id).delete()
    assert_tallies_match_jobs(acme)
    assert_tallies_match_jobs(other)

    # A change of no tallied column adds no row.
    rows = JobTally.objects.count()
    Job.objects.filter(cluster=acme).update(name="renamed", exit_code=3)
    assert JobTally.objects.count() == rows


def test_compaction_merges_the_rows_into_one_per_type_and_keeps_the_numbers(acme):
    make_jobs(acme, 300)
    before = jobs_characterize(Window(acme))
    deltas = JobTally.objects.filter(cluster=acme).count()
    assert deltas == 300

    assert job_tallies_compact(acme.id) == 300
    groups = len(cluster_tally(acme).groups)
    assert JobTally.objects.filter(cluster=acme, compacted=True).count() == groups <= 12
    after = jobs_characterize(Window(acme))
    for column, value in before.summary.items():
        assert after.summary[column] == (
            pytest.approx(value) if isinstance(value, float) else value
        ), column
    assert [t.gpu_jobs for t in after.types] == [t.gpu_jobs for t in before.types]
    assert after.duration_cdf == before.duration_cdf and after.gpus_cdf == before.gpus_cdf
    assert_tallies_match_jobs(acme)


def test_warm_up_task_merges_a_cluster_s_deltas_once_they_pile_up(acme, monkeypatch):
    from webapp.jobs.tasks import warm_characterization

    make_jobs(acme, 50)
    monkeypatch.setattr(services, "TALLY_DELTAS_MAX", 100)
    assert warm_characterization()["tally_rows_merged"] == 0
    make_jobs(acme, 60, seed=8)
    assert warm_characterization()["tally_rows_merged"] == 110
    assert not JobTally.objects.filter(cluster=acme, compacted=False).exists()
    assert_tallies_match_jobs(acme)


def test_rebuild_repairs_the_tally_after_writes_that_bypassed_the_trigger(acme):
    make_jobs(acme, 100)
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('vigil.job_tally', 'off', true)")
        make_jobs(acme, 10, seed=4)  # the way only the trace import may write
        cur.execute("SELECT set_config('vigil.job_tally', 'on', true)")
    assert cluster_tally(acme) != window_tally(Window(acme))
    job_tallies_rebuild(acme.id)
    assert_tallies_match_jobs(acme)
    assert jobs_characterize(Window(acme)).total.jobs == 110


def test_truncating_the_jobs_clears_the_tallies(acme):
    make_jobs(acme, 20)
    with connection.cursor() as cur:
        cur.execute("TRUNCATE jobs_job CASCADE")
    assert not JobTally.objects.exists()
    assert jobs_characterize(Window(acme)).total.jobs == 0


def test_tally_of_parsed_rows_equals_the_one_counted_in_sql(acme):
    """tally_of_columns (the import's) against TALLY_SQL over the same jobs, with fractional
    seconds, spans of days, jobs not started or not ended, and CPU jobs."""
    from webapp.jobs.acmetrace import Columns
    from webapp.jobs.trace_import import tally_of_columns

    t0 = datetime(2023, 3, 1, tzinfo=UTC)
    rows = []
    for i, (queue, duration, gpus, state) in enumerate(
        [
            (0.5, 3 * 86400 + 0.123457, 8, "completed"),
            (1.0, 122.0, 1, "failed"),
            (0.0, None, 4, "running"),
            (None, None, 2, "pending"),
            (17.25, 86399.999999, 0, "completed"),
            (3.0, 122.0, 1, "cancelled"),
        ]
    ):
        submit = t0 + timedelta(seconds=i)
        start = None if queue is None else submit + timedelta(seconds=queue)
        end = None if duration is None else start + timedelta(seconds=duration)
        job_type = "eval" if i % 2 else "pretrain"
        Job.objects.create(
            cluster=acme,
            scheduler_id=f"j{i}",
            job_type=job_type,
            state=state,
            submit_at=submit,
            start_at=start,
            end_at=end,
            gpus_requested=gpus,
        )
        rows.append((f"j{i}", "", job_type, state, submit.timestamp(),
                     start and start.timestamp(), end and end.timestamp(), gpus, 1, 8))  # fmt: skip
    assert tally_of_columns(Columns.from_rows(rows)) == window_tally(Window(acme))
    assert_tallies_match_jobs(acme)
