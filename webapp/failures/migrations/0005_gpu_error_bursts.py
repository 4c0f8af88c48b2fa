"""GPU errors become one row per (GPU, Xid, burst): `last_ts` (the rows so far each hold one
line, so their last line is their first), and the batches whose errors were counted."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("failures", "0004_xid_actions"),
        ("fleet", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpuerrorevent",
            name="last_ts",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunSQL(
            "UPDATE failures_gpuerrorevent SET last_ts = ts", reverse_sql=migrations.RunSQL.noop
        ),
        migrations.AlterField(
            model_name="gpuerrorevent",
            name="last_ts",
            field=models.DateTimeField(),
        ),
        migrations.CreateModel(
            name="GpuErrorBatch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("batch_id", models.UUIDField()),
                ("received_at", models.DateTimeField(db_index=True)),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="fleet.node",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("node", "batch_id"), name="gpuerrorbatch_unique"
                    )
                ],
            },
        ),
    ]
