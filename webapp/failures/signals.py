"""Job saves the failures app reacts to, without the jobs app knowing about failures.

- A job that ends failed gets its failure event (and a diagnosis task after commit).
- A pretraining job's new last_checkpoint_at is recorded, so the reliability page can derive
  the checkpoint interval it uses.
Each costs a query only for the jobs concerned (bulk imports send no signals).
"""

from __future__ import annotations

from django.db import connection
from django.db.models.signals import post_save
from django.dispatch import receiver

from webapp.jobs.choices import JobType
from webapp.jobs.models import Job


@receiver(post_save, sender=Job, dispatch_uid="failures.job_saved")
def job_saved(sender: type[Job], instance: Job, **kwargs: object) -> None:
    from webapp.failures.services import FAILED_STATES, job_failure_open

    if instance.state in FAILED_STATES and instance.end_at is not None:
        job_failure_open(instance)
    if instance.job_type == JobType.PRETRAIN and instance.last_checkpoint_at is not None:
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO failures_checkpointseen (job_id, at) VALUES (%s, %s) "
                "ON CONFLICT DO NOTHING",
                [instance.pk, instance.last_checkpoint_at],
            )
