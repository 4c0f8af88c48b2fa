"""The admin names scheduler latencies in plain English."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0002_work_row_lease'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='schedulerlatency',
            options={'verbose_name_plural': 'scheduler latencies'},
        ),
    ]
