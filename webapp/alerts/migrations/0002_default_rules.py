"""The built-in alert rules with their defaults; an operator tunes them in
the admin. Limits and windows match deploy/prometheus/rules/vigil.rules.yml, so a site that
alerts from its own Prometheus sees the same alerts."""

from django.db import migrations

# Event alerts (a failure, an action) stay firing this long after their event: the 900 s
# window of the shipped Prometheus rules.
EVENT_S = 900

RULES = [
    {
        "name": "gpu-hardware",
        "kind": "gpu_hardware",
        "severity": "critical",
        # The paging Xids are the catalogue's (webapp/failures/taxonomy.py, page=True);
        # extra_xids adds site-specific ones. Double-bit ECC, remap failure and GPU lost
        # always count.
        "params": {"extra_xids": [], "error_kinds": ["ecc_dbe", "remap_failure", "gpu_lost"]},
        "resolve_after_s": EVENT_S,
        "description": "A critical Xid, a double-bit ECC error or a GPU that fell off the bus",
    },
    {
        "name": "gpu-thermal",
        "kind": "gpu_thermal",
        "severity": "warning",
        # 85 C: below the H100/A100 slowdown thresholds (about 87-90 C, nvidia-smi -q "GPU
        # Slowdown Temp"), as in the shipped Prometheus rules.
        "threshold": 85.0,
        "for_s": 600,
        "description": "GPU temperature above the limit, or thermally throttled, for for_s",
    },
    {
        "name": "node-down",
        "kind": "node_down",
        "severity": "warning",
        # Nodes are "stale" after VIGIL_STALE_AFTER_S (120 s); 10 minutes before an alert.
        "for_s": 600,
        "description": "A node has sent nothing for for_s",
    },
    {
        "name": "job-failed",
        "kind": "job_failed",
        "severity": "warning",
        # A failed pretraining job on 64 GPUs or more pages; a debug job's failure is info.
        # Scheduler outcomes that are not a failure of the job are not alerts.
        "params": {
            "critical_job_types": ["pretrain"],
            "critical_min_gpus": 64,
            "info_job_types": ["debug"],
            "skip_causes": ["cancelled", "requeued", "preempted"],
        },
        "resolve_after_s": EVENT_S,
        "send_resolved": False,
        "description": "A job failed (severity from its type and size)",
    },
    {
        "name": "recovery-failed",
        "kind": "recovery_failed",
        "severity": "critical",
        "resolve_after_s": EVENT_S,
        "send_resolved": False,
        "description": "A recovery action failed",
    },
    {
        "name": "recovery-approval",
        "kind": "recovery_approval",
        "severity": "warning",
        # Repeats while it waits: an hour.
        "repeat_interval_s": 3600,
        "resolve_after_s": 24 * 3600,
        "description": "A recovery action is waiting for an operator's approval",
    },
    {
        "name": "gpus-idle",
        "kind": "gpus_idle",
        "severity": "info",
        # Idle: utilization at or below 1 % (a GPU held by a job that runs nothing on it).
        "threshold": 1.0,
        "for_s": 1800,
        "description": "GPUs allocated to a running job have been idle for for_s",
    },
    {
        "name": "ingest-lag",
        "kind": "ingest_lag",
        "severity": "warning",
        "threshold": 300.0,
        "for_s": 300,
        "description": "The newest stored sample is older than threshold seconds",
    },
    {
        "name": "ingest-refused",
        "kind": "ingest_refused",
        "severity": "warning",
        # More than 1 refused batch a minute over 10 minutes (shipped Prometheus rules).
        "threshold": 10.0,
        "params": {"window_s": 600},
        "for_s": 600,
        "description": "More than threshold batches refused within params.window_s",
    },
]


def create(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    for rule in RULES:
        AlertRule.objects.get_or_create(name=rule["name"], defaults=rule)


def remove(apps, schema_editor):
    apps.get_model("alerts", "AlertRule").objects.filter(
        name__in=[r["name"] for r in RULES]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]
    operations = [migrations.RunPython(create, remove)]
