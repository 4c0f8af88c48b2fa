"""A job's project: what its energy and GPU-hours are charged to (Slurm: the account), the
daily energy CSV's project column."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_job_tallies")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="project",
            field=models.CharField(blank=True, db_default="", default="", max_length=128),
        ),
    ]
