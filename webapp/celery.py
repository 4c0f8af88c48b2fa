"""The Celery app and the one beat schedule."""

import logging
import os
from typing import Any

from celery import Celery, Task
from celery.schedules import crontab

from collectors.schema import INGEST_QUEUE, INGEST_TASK, JOB_EVENTS_TASK, NODE_EVENTS_TASK
from collectors.transport import reuse_redis_clients

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

log = logging.getLogger("vigil.ingest")

# What the ingest queue is for. Every node can write to it (deploy/redis/README.md), so it
# can carry any task name a node chooses: a recovery action, an alert, a prune.
INGEST_QUEUE_TASKS = frozenset({INGEST_TASK, JOB_EVENTS_TASK, NODE_EVENTS_TASK})


class VigilTask(Task):
    """Every task of the app: one that came through the ingest queue and is not an ingest task
    is refused (recorded as `foreign_task`) instead of run.

    A worker that consumes only the ingest queue (`-Q ingest`, as the README deploys them)
    refuses every other task name, whatever the message says of its route. A worker that also
    consumes other queues can only go by the routing key the message carries, which a node
    writing to Redis could forge: ingest workers are kept apart for that reason.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.name not in INGEST_QUEUE_TASKS and _from_ingest_queue(self.request):
            return _foreign_task_refuse(self.name)
        return super().__call__(*args, **kwargs)


def _from_ingest_queue(request: Any) -> bool:
    if getattr(request, "called_directly", True):  # run in-process (eager, tests), not sent
        return False
    consumed = app.amqp.queues.consume_from
    if consumed and set(consumed) == {INGEST_QUEUE}:
        return True
    return (getattr(request, "delivery_info", None) or {}).get("routing_key") == INGEST_QUEUE


def _foreign_task_refuse(name: str) -> dict:
    from collectors.schema import UnreadableBatch
    from webapp.core.ingest import Refused
    from webapp.core.refusals import batch_reject

    why = f"task {name[:200]} came through the ingest queue, which runs only the ingest tasks"
    batch_reject(UnreadableBatch(why), Refused("foreign_task", why))
    return {"rejected": "foreign_task"}


reuse_redis_clients()  # one redis-py client per pool, not one per command
app = Celery("vigil", task_cls=VigilTask)
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
