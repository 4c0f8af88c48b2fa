"""The executor interface, and running a command line with a deadline.

An executor never touches the database: it gets a `Target` (plain data copied from the action
row) and returns argv lists and results. The services record every command before it runs and
its result after, and decide what a failure means (`transient` says whether retrying can help).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from django.conf import settings

# What the audit keeps of a command's stdout and stderr (their ends).
OUTPUT_MAX_CHARS = 8000
# The only variables of the worker's environment a scheduler's tool is given: where it finds
# programs, its locale and home, and the cluster's configuration. Vigil's own settings (its
# secret key, database and broker URLs, VIGIL_*) never reach a tool, nor a job it submits.
PASSED_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "SLURM_CONF", "KUBECONFIG",
)  # fmt: skip


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


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def as_dict(self) -> dict:
        return {
            "exit": self.returncode,
            "stdout": self.stdout[-OUTPUT_MAX_CHARS:],
            "stderr": self.stderr[-OUTPUT_MAX_CHARS:],
        }


def private_dir(path: Path) -> Path:
    """`path` as a folder only this user may enter (0700), made if missing: batch scripts,
    check outputs and evaluation outputs lie there, often on shared storage. A folder of
    another user, or a link, is refused."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(f"{path}: not a folder of this user (uid {os.getuid()})")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def command_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a scheduler command: `PASSED_ENV` of the worker's, and `extra`."""
    return {k: os.environ[k] for k in PASSED_ENV if k in os.environ} | (extra or {})


def command_run(
    argv: Sequence[str], *, timeout_s: float | None = None, env: dict | None = None
) -> CommandResult:
    """Run argv (no shell) with `command_env(env)`; a missing program or a timeout is an exit
    status, not an exception."""
    timeout_s = timeout_s or settings.VIGIL_SCHEDULER_TIMEOUT_S
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=command_env(env),
        )
    except FileNotFoundError as exc:
        return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not found ({exc.strerror})")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return CommandResult(tuple(argv), 124, out, f"timed out after {timeout_s:g} s")
    return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


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
