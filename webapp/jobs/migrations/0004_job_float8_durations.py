"""Durations and GPU time as float8 arithmetic (date_part) instead of numeric (EXTRACT), and
no (cluster, state) index: both cost the trace import more than they gave the read side.

PostgreSQL cannot change a generated column's expression, so the three columns are dropped and
added again (PostgreSQL computes them for the stored rows).
"""

import django.db.models.expressions
from django.db import migrations, models


class EpochSeconds(models.Func):
    """date_part('epoch', ...) as float8 (was webapp.jobs.models.EpochSeconds, gone with the
    generated columns in 0005)."""

    template = "date_part('epoch', %(expressions)s)"
    output_field = models.FloatField()


def _epoch(a: str, b: str):
    return EpochSeconds(
        django.db.models.expressions.CombinedExpression(models.F(a), "-", models.F(b))
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0003_default_type_rules"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="job", name="job_cluster_state"),
        migrations.RemoveField(model_name="job", name="duration_s"),
        migrations.RemoveField(model_name="job", name="queue_s"),
        migrations.RemoveField(model_name="job", name="gpu_time_s"),
        migrations.AddField(
            model_name="job",
            name="duration_s",
            field=models.GeneratedField(
                db_persist=True,
                expression=_epoch("end_at", "start_at"),
                output_field=models.FloatField(null=True),
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="queue_s",
            field=models.GeneratedField(
                db_persist=True,
                expression=_epoch("start_at", "submit_at"),
                output_field=models.FloatField(null=True),
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="gpu_time_s",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.db.models.expressions.CombinedExpression(
                    _epoch("end_at", "start_at"), "*", models.F("gpus_requested")
                ),
                output_field=models.FloatField(null=True),
            ),
        ),
    ]
