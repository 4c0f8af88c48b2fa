"""Executors: turn one recovery action into scheduler commands (as data), run them, and tell
whether a command interrupted by a crash already took effect. One per scheduler kind."""

from __future__ import annotations

from webapp.recovery.executors.base import (
    CommandResult,
    Executor,
    Target,
    executor_for,
)

__all__ = ["CommandResult", "Executor", "Target", "executor_for"]
