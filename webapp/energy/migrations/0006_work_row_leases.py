"""Exports and report deliveries are claimed with a lease (core/workrows.py), like every
work row: a row a worker holds says who and until when. A delivery starts pending. Rows taken
before the lease existed get one: an export running since started_at keeps the ten minutes
it had; a delivery left sending is free to send again (its worker held a row lock, gone)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('energy', '0005_export_kinds_month_versions'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='energyreportdelivery',
            options={'ordering': ['-created_at'], 'verbose_name_plural': 'energy report deliveries'},
        ),
        migrations.AddField(
            model_name='energyexport',
            name='attempts',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='energyexport',
            name='claimed_by',
            field=models.CharField(blank=True, default='', max_length=128),
        ),
        migrations.AddField(
            model_name='energyexport',
            name='lease_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='energyreportdelivery',
            name='attempts',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='energyreportdelivery',
            name='claimed_by',
            field=models.CharField(blank=True, default='', max_length=128),
        ),
        migrations.AddField(
            model_name='energyreportdelivery',
            name='lease_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='energyreportdelivery',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('sending', 'Sending'), ('sent', 'Sent'), ('failed', 'Failed')], default='pending', max_length=16),
        ),
        migrations.RunSQL(
            "UPDATE energy_energyexport SET lease_until = started_at + interval '10 minutes' "
            "WHERE status = 'running' AND lease_until IS NULL",
            migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            "UPDATE energy_energyreportdelivery SET lease_until = created_at "
            "WHERE status = 'sending' AND lease_until IS NULL",
            migrations.RunSQL.noop,
        ),
    ]
