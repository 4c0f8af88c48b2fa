"""Names of the alerts tasks, sent by name after commit (so no write module imports tasks.py)."""

from __future__ import annotations

FAILURE_TASK = "vigil.alerts.failure"
ACTION_TASK = "vigil.alerts.recovery_action"
FLUSH_TASK = "vigil.alerts.flush"
SEND_TASK = "vigil.alerts.send"
