"""What recovery sends others: the signal of an action that failed for good (the alerts app
alerts from it), in a module that imports no recovery code, so no cycle forms."""

from __future__ import annotations

from django.dispatch import Signal

# Sent inside the transaction that marks a recovery action failed for good
# (execution._failed; sender RecoveryAction, `action`).
action_failed = Signal()
