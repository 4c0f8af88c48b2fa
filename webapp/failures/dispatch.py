"""What the failures writes fan out: follow-up tasks sent by name after the commit, and the
`failure_diagnosed` signal other apps act on.

By name, so that no write module imports tasks.py (which imports the writes): the task is
registered under DIAGNOSE_TASK in tasks.py, and the worker resolves the name.
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

from webapp.celery import app

DIAGNOSE_TASK = "vigil.failures.diagnose"

# Sent inside the transaction that stored a diagnosis (sender FailureEvent, `failure`): the
# recovery app plans from it, the alerts app alerts from it; the failures app knows neither.
failure_diagnosed = Signal()


def failure_diagnose_later(pk: int) -> None:
    """Diagnose failure `pk` in a worker once the current transaction commits."""
    # robust: a broker hiccup must not fail the write that committed the failure; the
    # failure stays "pending" and is diagnosed again when new evidence comes.
    transaction.on_commit(lambda: app.send_task(DIAGNOSE_TASK, args=[pk]), robust=True)
