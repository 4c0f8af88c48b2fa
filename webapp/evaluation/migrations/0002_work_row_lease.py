"""A run is claimed with a lease while a worker submits it (core/workrows.py)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='evaluationrun',
            name='attempts',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='evaluationrun',
            name='claimed_by',
            field=models.CharField(blank=True, default='', max_length=128),
        ),
        migrations.AddField(
            model_name='evaluationrun',
            name='lease_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
