"""The scheduler client shared by recovery and evaluation: the queue of a cluster's scheduler
worker, and running a scheduler's command line with a deadline in a private folder.

A cluster's scheduler commands (scontrol, sbatch, kubectl) run on one worker per cluster, on
a host with the scheduler's CLI and its configuration; that worker consumes the cluster's
queue (`scheduler_queue`). A command never gets Vigil's own environment (`PASSED_ENV`).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

# What the audit keeps of a command's stdout and stderr (their ends).
OUTPUT_MAX_CHARS = 8000
# The only variables of the worker's environment a scheduler's tool is given: where it finds
# programs, its locale and home, and the cluster's configuration. Vigil's own settings (its
# secret key, database and broker URLs, VIGIL_*) never reach a tool, nor a job it submits.
PASSED_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "SLURM_CONF", "KUBECONFIG",
)  # fmt: skip


def scheduler_queue(cluster_name: str) -> str:
    """The Celery queue of one cluster's scheduler worker (a host with the scheduler's CLI).
    Its name predates evaluation, which shares the worker: recovery's queue."""
    return f"recovery.{cluster_name}"


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
