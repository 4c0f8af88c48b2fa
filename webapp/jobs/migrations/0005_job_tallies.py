"""Job tallies (webapp/jobs/tallies.py): the per-cluster running summary the characterization
reads instead of aggregating every job; the triggers that keep it; the tallies of the jobs
already stored. And the trace import's costs cut: no generated duration / queue / GPU-time
columns (Job computes them; the characterization reads tallies) and no index on user.

The SQL is written out here, not imported, so this migration keeps meaning what it meant.
"""

import django.contrib.postgres.fields
import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

_COLUMNS = (
    "cluster_id, job_type, gpu, states, state_jobs, state_gpu_time_s, duration_s, "
    "duration_jobs, queue_s, queue_jobs, gpus, gpus_jobs, compacted"
)

# One delta row per changed job: the old row's tally subtracted, the new row's added. The
# insert trigger is off while the trace import COPYs (it adds its own tallies); updates fire
# only when a tallied column changed. date_part is the expression tallies.TALLY_SQL uses.
TRIGGERS = f"""
CREATE FUNCTION jobs_jobtally_add(j jobs_job, sign int8) RETURNS void LANGUAGE sql AS $$
    INSERT INTO jobs_jobtally ({_COLUMNS})
    SELECT j.cluster_id, j.job_type, j.gpus_requested > 0, ARRAY[j.state], ARRAY[sign],
        ARRAY[sign * coalesce(d * j.gpus_requested, 0)],
        array_remove(ARRAY[d], NULL),
        CASE WHEN d IS NULL THEN '{{}}'::int8[] ELSE ARRAY[sign] END,
        array_remove(ARRAY[q], NULL),
        CASE WHEN q IS NULL THEN '{{}}'::int8[] ELSE ARRAY[sign] END,
        ARRAY[j.gpus_requested::int8], ARRAY[sign], false
    FROM (SELECT date_part('epoch', j.end_at - j.start_at) AS d,
                 date_part('epoch', j.start_at - j.submit_at) AS q) x
$$;

CREATE FUNCTION jobs_job_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM jobs_jobtally_add(OLD, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM jobs_jobtally_add(NEW, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION jobs_job_tally_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobs_jobtally;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_job_tally_insert AFTER INSERT ON jobs_job FOR EACH ROW
    WHEN (current_setting('vigil.job_tally', true) IS DISTINCT FROM 'off')
    EXECUTE FUNCTION jobs_job_tally();
CREATE TRIGGER jobs_job_tally_update AFTER UPDATE ON jobs_job FOR EACH ROW
    WHEN ((OLD.cluster_id, OLD.job_type, OLD.state, OLD.gpus_requested, OLD.submit_at,
           OLD.start_at, OLD.end_at)
          IS DISTINCT FROM (NEW.cluster_id, NEW.job_type, NEW.state, NEW.gpus_requested,
           NEW.submit_at, NEW.start_at, NEW.end_at))
    EXECUTE FUNCTION jobs_job_tally();
CREATE TRIGGER jobs_job_tally_delete AFTER DELETE ON jobs_job FOR EACH ROW
    EXECUTE FUNCTION jobs_job_tally();
CREATE TRIGGER jobs_job_tally_truncate AFTER TRUNCATE ON jobs_job FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_job_tally_truncate();
"""

DROP_TRIGGERS = """
DROP TRIGGER jobs_job_tally_truncate ON jobs_job;
DROP TRIGGER jobs_job_tally_delete ON jobs_job;
DROP TRIGGER jobs_job_tally_update ON jobs_job;
DROP TRIGGER jobs_job_tally_insert ON jobs_job;
DROP FUNCTION jobs_job_tally_truncate();
DROP FUNCTION jobs_job_tally();
DROP FUNCTION jobs_jobtally_add(jobs_job, int8);
"""

# The jobs already stored: one merged row per cluster, type and GPU / CPU (tallies.TALLY_SQL;
# its hash tables want more than the default 4 MB).
BACKFILL = f"""
SET LOCAL work_mem = '256MB';
INSERT INTO jobs_jobtally ({_COLUMNS})
SELECT cluster_id, job_type, gpu,
    coalesce(array_agg(state) FILTER (WHERE part = 0), '{{}}'),
    coalesce(array_agg(n) FILTER (WHERE part = 0), '{{}}'),
    coalesce(array_agg(coalesce(gpu_time, 0)) FILTER (WHERE part = 0), '{{}}'),
    coalesce(array_agg(d) FILTER (WHERE part = 1 AND d IS NOT NULL), '{{}}'),
    coalesce(array_agg(n) FILTER (WHERE part = 1 AND d IS NOT NULL), '{{}}'),
    coalesce(array_agg(q) FILTER (WHERE part = 2 AND q IS NOT NULL), '{{}}'),
    coalesce(array_agg(n) FILTER (WHERE part = 2 AND q IS NOT NULL), '{{}}'),
    coalesce(array_agg(g) FILTER (WHERE part = 3), '{{}}'),
    coalesce(array_agg(n) FILTER (WHERE part = 3), '{{}}'),
    true
FROM (
    SELECT cluster_id, job_type, gpu, grouping(state, d, q, g) AS bits, state, d, q, g,
        count(*) AS n, sum(gpu_time) AS gpu_time
    FROM (SELECT cluster_id, job_type, gpus_requested > 0 AS gpu, state,
            date_part('epoch', end_at - start_at) AS d,
            date_part('epoch', start_at - submit_at) AS q, gpus_requested::int8 AS g,
            date_part('epoch', end_at - start_at) * gpus_requested AS gpu_time
          FROM jobs_job) j
    GROUP BY GROUPING SETS ((cluster_id, job_type, gpu, state), (cluster_id, job_type, gpu, d),
        (cluster_id, job_type, gpu, q), (cluster_id, job_type, gpu, g))
) s, LATERAL (SELECT CASE bits WHEN 7 THEN 0 WHEN 11 THEN 1 WHEN 13 THEN 2 ELSE 3 END AS part) k
GROUP BY cluster_id, job_type, gpu
"""


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0001_initial"),
        ("jobs", "0004_job_float8_durations"),
    ]

    operations = [
        *(
            migrations.AlterField(
                model_name="job",
                name=name,
                field=models.CharField(blank=True, db_default="", default="", max_length=length),
            )
            for name, length in (
                ("comment", 1024),
                ("name", 256),
                ("partition", 128),
                ("qos", 128),
                ("team", 128),
            )
        ),
        migrations.AlterField(
            model_name="job",
            name="updated_at",
            field=models.DateTimeField(
                auto_now=True, db_default=django.db.models.functions.datetime.Now()
            ),
        ),
        migrations.RemoveIndex(model_name="job", name="job_user"),
        migrations.RemoveField(model_name="job", name="duration_s"),
        migrations.RemoveField(model_name="job", name="gpu_time_s"),
        migrations.RemoveField(model_name="job", name="queue_s"),
        migrations.CreateModel(
            name="JobTally",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "job_type",
                    models.CharField(
                        choices=[
                            ("pretrain", "Pretraining"),
                            ("sft", "Supervised fine-tuning"),
                            ("mllm", "Multimodal LLM"),
                            ("eval", "Evaluation"),
                            ("debug", "Debug"),
                            ("other", "Other"),
                        ],
                        max_length=16,
                    ),
                ),
                ("gpu", models.BooleanField()),
                (
                    "states",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=16), size=None
                    ),
                ),
                (
                    "state_jobs",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                (
                    "state_gpu_time_s",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.FloatField(), size=None
                    ),
                ),
                (
                    "duration_s",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.FloatField(), size=None
                    ),
                ),
                (
                    "duration_jobs",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                (
                    "queue_s",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.FloatField(), size=None
                    ),
                ),
                (
                    "queue_jobs",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                (
                    "gpus",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                (
                    "gpus_jobs",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                ("compacted", models.BooleanField(default=False)),
                (
                    "cluster",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="fleet.cluster",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["cluster", "id"], name="jobtally_cluster_id"),
                ],
            },
        ),
        migrations.RunSQL(TRIGGERS, DROP_TRIGGERS),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
