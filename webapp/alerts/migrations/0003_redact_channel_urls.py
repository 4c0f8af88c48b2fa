"""Deliveries recorded before URLs were redacted kept a webhook's whole URL (its path is often
its secret) in `Notification.to`, which the delivery log shows: keep only scheme://host/..."""

from django.db import migrations


def redact(apps, schema_editor):
    from webapp.alerts.destinations import url_redacted

    Notification = apps.get_model("alerts", "Notification")
    rows = Notification.objects.filter(channel__kind__in=["webhook", "alertmanager"])
    for pk, to in rows.exclude(to="").values_list("pk", "to").iterator(chunk_size=2000):
        shown = url_redacted(to)
        if shown != to:
            Notification.objects.filter(pk=pk).update(to=shown)


class Migration(migrations.Migration):
    dependencies = [("alerts", "0002_default_rules")]

    operations = [migrations.RunPython(redact, migrations.RunPython.noop)]
