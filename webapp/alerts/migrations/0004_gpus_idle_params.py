"""The idle-GPU rule's knobs written into its params, so an operator sees them in the admin:
severity by the GPUs idle, the idle GPU-hours that fire it before for_s, and how long a job
must look busy before its alert clears (webapp/alerts/evaluate.py holds the same defaults)."""

from django.db import migrations

PARAMS = {
    "severity_gpus": {"warning": 8, "critical": 64},
    "fire_gpu_hours": 4.0,
    "clear_s": 180,
}


def fill(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    for rule in AlertRule.objects.filter(kind="gpus_idle"):
        rule.params = {**PARAMS, **(rule.params or {})}
        rule.save(update_fields=["params"])


class Migration(migrations.Migration):
    dependencies = [("alerts", "0003_redact_channel_urls")]
    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
