"""Exports get a kind (the daily CSV, or the report PDF printed by a worker) and the data
version they were built from, so a month's export is built once per kind and data; the month
versions the rollup bumps (EnergyMonthVersion) key the cached reports."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("energy", "0004_energy_export"),
        ("fleet", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="EnergyMonthVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("month", models.CharField(max_length=7)),
                ("version", models.PositiveBigIntegerField(default=0)),
                ("changed_at", models.DateTimeField()),
                (
                    "cluster",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="fleet.cluster",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("cluster", "month"), name="energymonthversion_once"
                    )
                ],
            },
        ),
        migrations.RenameField(model_name="energyexport", old_name="csv_gz", new_name="file_gz"),
        migrations.RenameField(
            model_name="energyexport", old_name="csv_bytes", new_name="file_bytes"
        ),
        migrations.AddField(
            model_name="energyexport",
            name="kind",
            field=models.CharField(
                choices=[("daily_csv", "Daily CSV"), ("report_pdf", "Report PDF")],
                default="daily_csv",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="energyexport",
            name="data_version",
            field=models.CharField(blank=True, default="", max_length=256),
        ),
        migrations.AddIndex(
            model_name="energyexport",
            index=models.Index(fields=["cluster", "month", "kind"], name="energyexport_month"),
        ),
    ]
