"""Executors: turn one recovery action into scheduler commands (as data), run them, and tell
whether a command interrupted by a crash already took effect. One per scheduler kind."""

from __future__ import annotations

from webapp.recovery.executors.base import CommandResult, Executor, Target, UnsupportedAction
from webapp.recovery.executors.kubernetes import KubernetesExecutor
from webapp.recovery.executors.simulated import SimulatedExecutor
from webapp.recovery.executors.slurm import SlurmExecutor

EXECUTORS: dict[str, type[Executor]] = {
    c.kind: c for c in (SlurmExecutor, KubernetesExecutor, SimulatedExecutor)
}


def executor_for(kind: str) -> Executor:
    try:
        return EXECUTORS[kind]()
    except KeyError:
        raise UnsupportedAction(f"unknown executor {kind!r}") from None


__all__ = ["CommandResult", "Executor", "Target", "UnsupportedAction", "executor_for"]
