"""Celery tasks of the energy app: thin wrappers over services."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from webapp.energy.services import (
    BUILD_EXPORT_TASK,
    energy_reports_due,
    energy_rollups_refresh,
    export_build,
    exports_prune,
    exports_resend,
)


@shared_task(name="vigil.energy.refresh_rollups", ignore_result=True)
def refresh_rollups() -> dict:
    return asdict(energy_rollups_refresh())


@shared_task(name="vigil.energy.send_monthly_reports", bind=True, ignore_result=True)
def send_monthly_reports(self) -> dict | None:
    return energy_reports_due(worker=self.request.hostname or "worker")


@shared_task(name=BUILD_EXPORT_TASK, bind=True, ignore_result=True)
def build_export(self, export_id: int) -> str | None:
    """Build one export; the row is claimed, so a redelivered task builds nothing."""
    export = export_build(export_id, worker=self.request.hostname or "worker")
    return None if export is None else export.status


@shared_task(name="vigil.energy.resend_exports", ignore_result=True)
def resend_exports() -> int:
    """Exports whose build task was lost are sent again (beat, every minute)."""
    return exports_resend()


@shared_task(name="vigil.energy.prune_exports", ignore_result=True)
def prune_exports() -> dict:
    """Delete exports past their retention (daily, from the beat schedule)."""
    return {"pruned": exports_prune()}
