"""Celery tasks of the energy app: thin wrappers over services."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from webapp.energy.services import energy_reports_due, energy_rollups_refresh


@shared_task(name="vigil.energy.refresh_rollups", ignore_result=True)
def refresh_rollups() -> dict:
    return asdict(energy_rollups_refresh())


@shared_task(name="vigil.energy.send_monthly_reports", ignore_result=True)
def send_monthly_reports() -> dict | None:
    return energy_reports_due()
