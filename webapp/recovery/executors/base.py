"""The executor interface (a command line is run by webapp/core/scheduler.py, with a deadline).

An executor never touches the database: it gets a `Target` (plain data copied from the action
row) and returns argv lists and results. The services record every command before it runs and
its result after, and decide what a failure means (`transient` says whether retrying can help).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from django.conf import settings

# The scheduler client lives in core (evaluation runs commands on the same worker); the names
# stay importable from here for the executors.
from webapp.core.scheduler import (  # noqa: F401
    OUTPUT_MAX_CHARS,
    PASSED_ENV,
    CommandResult,
    command_env,
    command_run,
    private_dir,
)


class UnsupportedAction(ValueError):
    """The executor cannot do this kind of action (e.g. a health check on Kubernetes)."""


@dataclass(frozen=True)
class Target:
    """What one action acts on: copied from its row, so executors stay plain functions."""

    action_id: int
    kind: str
    host: str = ""
    job: str = ""
    cause: str = ""
    failure_id: int | None = None
    params: dict = field(default_factory=dict)


class Executor:
    """One scheduler's way of carrying out actions. Subclasses fill in the command builders."""

    kind: ClassVar[str] = ""
    simulated: ClassVar[bool] = False

    def commands(self, target: Target) -> list[list[str]]:
        """The exact command lines that carry out `target`, in order (data first)."""
        builder = getattr(self, f"_{target.kind}", None)
        if builder is None:
            raise UnsupportedAction(f"{self.kind} cannot run a {target.kind} action")
        return builder(target)

    def supports(self, kind: str) -> bool:
        """Whether this executor can carry out actions of `kind` (it builds their commands)."""
        return callable(getattr(self, f"_{kind}", None))

    def run(self, argv: Sequence[str], target: Target) -> CommandResult:
        return command_run(argv, timeout_s=self.timeout_s(target))

    def timeout_s(self, target: Target) -> float:
        return float(settings.VIGIL_SCHEDULER_TIMEOUT_S)

    def before(self, argv: Sequence[str], target: Target) -> dict:
        """Facts read from the scheduler before a command runs, for `done` after a crash."""
        return {}

    def done(self, argv: Sequence[str], target: Target, before: dict) -> bool:
        """Whether an interrupted command already took effect (then it is not run again)."""
        return False

    def tolerated(self, argv: Sequence[str], target: Target, result: CommandResult) -> bool:
        """Whether this failed command is recorded but does not fail the action."""
        return False

    def transient(self, result: CommandResult) -> bool:
        """Whether retrying the same command can succeed (the scheduler was unreachable)."""
        return result.returncode == 124

    def followups(self, target: Target, results: Sequence[CommandResult]) -> dict:
        """What the action found, for the services (a health check's failing nodes)."""
        return {}
