"""A job's GPU time in its runs before its current one, stored on the job (filled by the
job-event ingest when it applies a requeue or a start), so the characterization sums one column
instead of joining the cluster's allocations; jobs stored before the column are filled here from
their closed allocations, as the ingest computes it."""

from django.db import migrations, models

# The same arithmetic as webapp.jobs.services (_EARLIER_RUNS_SQL), over every job: the closed
# allocations that started before the job's current run (all of them while it waits).
FILL_SQL = """
UPDATE jobs_job j SET earlier_runs_gpu_time_s = s.gpu_time_s
FROM (
    SELECT a.job_id, sum(date_part('epoch', a."end" - a.start)) AS gpu_time_s
    FROM jobs_joballocation a JOIN jobs_job k ON k.id = a.job_id
    WHERE a."end" IS NOT NULL AND (k.start_at IS NULL OR a.start < k.start_at)
    GROUP BY a.job_id
) s
WHERE j.id = s.job_id AND s.gpu_time_s > 0
"""


def earlier_runs_fill(cursor) -> None:
    """Fill the column of every job with earlier runs (a cursor of the migrating connection)."""
    cursor.execute(FILL_SQL)


def _fill(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cur:
        earlier_runs_fill(cur)


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0007_gpu_minor_number"),
        ("jobs", "0006_job_project"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="earlier_runs_gpu_time_s",
            field=models.FloatField(db_default=0.0, default=0.0),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("earlier_runs_gpu_time_s__gt", 0)),
                fields=["cluster", "submit_at"],
                name="job_requeued_submit",
            ),
        ),
        migrations.RunPython(_fill, migrations.RunPython.noop),
    ]
