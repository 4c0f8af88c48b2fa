"""The energy app's write API: what views, tasks, signals and other apps call to change its
state. The work is done by one module per concern: the hourly rollups (rollups.py), the
monthly report by email (report_mail.py), the exports (exports.py); PUE and market factors
have carbon_services.py. Whatever changes a report's inputs calls `report_inputs_changed`.
"""

from __future__ import annotations

import time

from django.core.cache import cache
from django.db import transaction

from webapp.energy.exports import (
    BUILD_EXPORT_TASK,
    export_build,
    export_file,
    export_request,
    exports_prune,
    exports_resend,
)
from webapp.energy.report_mail import (
    UNSUBSCRIBE_PURPOSE,
    energy_reports_due,
    energy_reports_send,
    report_unsubscribe,
)
from webapp.energy.rollups import RefreshResult, energy_rollups_rebuild, energy_rollups_refresh
from webapp.energy.selectors import INPUTS_VERSION_KEY

__all__ = [
    "BUILD_EXPORT_TASK",
    "UNSUBSCRIBE_PURPOSE",
    "RefreshResult",
    "energy_reports_due",
    "energy_reports_send",
    "energy_rollups_rebuild",
    "energy_rollups_refresh",
    "export_build",
    "export_file",
    "export_request",
    "exports_prune",
    "exports_resend",
    "report_inputs_changed",
    "report_unsubscribe",
]


def report_inputs_changed() -> None:
    """A report input outside the rollup changed (PUE, market factor, intensity, grid zone,
    power profile): every cached report is stale, now (for a reader in this transaction) and
    once it commits (a reader who computed from the old rows meanwhile stored them under the
    version of now)."""

    def bump() -> None:
        cache.set(INPUTS_VERSION_KEY, time.time_ns(), None)

    bump()
    transaction.on_commit(bump, robust=True)
