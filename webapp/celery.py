"""The Celery app and the one beat schedule."""

import os

from celery import Celery
from celery.schedules import crontab

from collectors.transport import reuse_redis_clients

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

reuse_redis_clients()  # one redis-py client per pool, not one per command
# Every task refuses what came through the ingest queue unless it is an ingest task
# (webapp/core/taskbase.py; named, not imported, so that core may import this app).
app = Celery("vigil", task_cls="webapp.core.taskbase:VigilTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    # Partitions for the next days exist before samples arrive; old ones are dropped whole.
    "telemetry-partitions": {
        "task": "vigil.telemetry.maintain_partitions",
        "schedule": crontab(minute=7),
    },
    # Fold newly stored samples into the 1-minute rollup (only the minutes that changed).
    "telemetry-rollups": {
        "task": "vigil.telemetry.refresh_rollups",
        "schedule": 15.0,
    },
    # Raw samples past VIGIL_COMPACT_AFTER_HOURS packed into one row per GPU-hour (bounded).
    "telemetry-compaction": {
        "task": "vigil.telemetry.compact_samples",
        "schedule": 60.0,
    },
    # The hourly rollup folded from the 1-minute one (current and previous hour, late hours).
    "telemetry-rollups-hourly": {
        "task": "vigil.telemetry.refresh_hourly_rollups",
        "schedule": 300.0,
    },
    # Batches a dead worker took off the queue without recording them (collectors/outbox.py).
    "telemetry-outbox": {
        "task": "vigil.telemetry.redeliver_lost_batches",
        "schedule": 60.0,
    },
    # Fail-slow GPUs of running jobs (webapp/failures: stragglers).
    "failures-stragglers": {
        "task": "vigil.failures.detect_stragglers",
        "schedule": 60.0,
    },
    # Recovery actions whose message was lost or whose worker died are sent again.
    "recovery-sweep": {
        "task": "vigil.recovery.sweep",
        "schedule": 30.0,
    },
    # Alert rules on conditions (temperature, node down, idle GPUs, ingest), due groups and
    # stale deliveries; failures and failed actions alert at once, on their own events.
    "alerts-evaluate": {
        "task": "vigil.alerts.evaluate",
        "schedule": 15.0,
    },
    # GPU-hours that got new samples are accounted again (webapp/energy: hourly rollup).
    "energy-rollups": {
        "task": "vigil.energy.refresh_rollups",
        "schedule": 300.0,
    },
    # The managers' monthly report, once its day and hour have come (VIGIL_ENERGY_REPORT_DAY,
    # _HOUR); hourly, so a beat that was down catches up, and never twice (delivery rows).
    "energy-monthly-report": {
        "task": "vigil.energy.send_monthly_reports",
        "schedule": crontab(minute=20),
    },
    # CSV exports whose build task never reached a worker (broker down at commit, message
    # lost, worker died mid-build) are sent again; the build claims its row, so once.
    "energy-exports": {
        "task": "vigil.energy.resend_exports",
        "schedule": 60.0,
    },
    # Rows kept a number of days, then deleted once a day: what the engine read for a failure
    # (VIGIL_FAILURE_INPUTS_RETENTION_DAYS), built exports (VIGIL_ENERGY_EXPORT_RETENTION_DAYS),
    # finished notifications and outbox emails (VIGIL_ALERTS_NOTIFICATION_RETENTION_DAYS).
    "failures-prune-inputs": {
        "task": "vigil.failures.prune_inputs",
        "schedule": crontab(hour=3, minute=41),
    },
    "energy-prune-exports": {
        "task": "vigil.energy.prune_exports",
        "schedule": crontab(hour=3, minute=43),
    },
    "alerts-prune-notifications": {
        "task": "vigil.alerts.prune_notifications",
        "schedule": crontab(hour=3, minute=47),
    },
    # Ingest refusals past VIGIL_REFUSALS_RETENTION_DAYS (their counts by reason are kept).
    "core-prune-refusals": {
        "task": "vigil.core.prune_refusals",
        "schedule": crontab(hour=3, minute=53),
    },
    "fleet-node-states": {
        "task": "vigil.fleet.mark_stale_nodes",
        "schedule": 30.0,
    },
    # The characterization page of every cluster stays in the cache (its entries live 300 s,
    # webapp/jobs/selectors.py), so no visitor waits for a million-job computation.
    "jobs-warm-characterization": {
        "task": "vigil.jobs.warm_characterization",
        "schedule": 120.0,
    },
}
