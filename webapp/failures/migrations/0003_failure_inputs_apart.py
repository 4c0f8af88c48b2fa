"""What the engine read moves from FailureEvent.inputs to a table of its own (FailureInputs),
so that no list of failures loads it. Existing inputs are copied over before the column goes;
going back copies them into the column again."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("failures", "0002_alter_failureevent_cause_alter_proposedrule_cause"),
    ]

    operations = [
        migrations.CreateModel(
            name="FailureInputs",
            fields=[
                (
                    "failure",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="stored_inputs",
                        serialize=False,
                        to="failures.failureevent",
                    ),
                ),
                ("data", models.JSONField(blank=True, default=dict)),
                ("stored_at", models.DateTimeField(db_index=True)),
            ],
        ),
        migrations.RunSQL(
            sql="""
                INSERT INTO failures_failureinputs (failure_id, data, stored_at)
                SELECT id, inputs, COALESCE(diagnosed_at, detected_at)
                FROM failures_failureevent WHERE inputs <> '{}'::jsonb
            """,
            reverse_sql="""
                UPDATE failures_failureevent f SET inputs = i.data
                FROM failures_failureinputs i WHERE i.failure_id = f.id
            """,
        ),
        migrations.RemoveField(
            model_name="failureevent",
            name="inputs",
        ),
    ]
