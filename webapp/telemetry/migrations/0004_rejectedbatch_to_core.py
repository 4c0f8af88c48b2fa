# RejectedBatch now belongs to core (core 0001 took over its state); the table and its rows stay.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0003_rollup_dirty"),
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="RejectedBatch")],
            database_operations=[],
        ),
    ]
