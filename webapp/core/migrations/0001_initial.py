# RejectedBatch moves from telemetry to core with its table (telemetry_rejectedbatch) and
# rows kept: only Django's model state moves, no SQL runs (telemetry 0004 drops its state).
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("telemetry", "0003_rollup_dirty"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RejectedBatch",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("received_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("reason", models.CharField(db_index=True, max_length=32)),
                        ("detail", models.TextField()),
                        ("cluster", models.CharField(blank=True, default="", max_length=128)),
                        ("node", models.CharField(blank=True, default="", max_length=128)),
                        ("batch_id", models.CharField(blank=True, default="", max_length=64)),
                        ("size_bytes", models.IntegerField(default=0)),
                    ],
                    options={
                        "db_table": "telemetry_rejectedbatch",
                        "ordering": ["-received_at"],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
