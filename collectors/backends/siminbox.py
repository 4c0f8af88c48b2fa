"""The simulated scheduler's inbox: the demo's simulated recovery executor hands it the
scheduler commands it built (drain, requeue, resume), one JSON file each, and the simulator of
the named cluster carries them out at its next round (`simjobs.py`)."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("vigil.collector")

# The simulated scheduler's inbox: a folder of scheduler commands, one JSON file each
# (`scheduler_commands_send`), read by the simulator of the named cluster at its next round.
INBOX_ENV = "VIGIL_SIM_SCHEDULER_DIR"


def scheduler_commands_send(
    inbox: Path, cluster: str, commands: Sequence[Sequence[str]], ts: float | None = None
) -> Path:
    """Hand scheduler commands (argv lists, as the Slurm executor builds them) to the
    simulated scheduler of `cluster`, as one file written whole (a hidden temporary name,
    then a rename), named so that files sort in the order they were sent."""
    inbox.mkdir(parents=True, exist_ok=True)
    body = json.dumps(
        {
            "cluster": cluster,
            "ts": time.time() if ts is None else ts,
            "commands": [[str(a) for a in argv] for argv in commands],
        }
    )
    name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    tmp = inbox / f".{name}.tmp"
    tmp.write_text(body, "utf-8")
    return tmp.rename(inbox / name)


class SchedulerInbox:
    """The commands sent to the simulated scheduler, taken (and removed) in the order sent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def take(self) -> list[tuple[str, float, list[list[str]]]]:
        out = []
        try:
            files = sorted(self.path.glob("*.json"))
        except OSError:
            return []
        for file in files:
            try:
                out.append(self._parse(json.loads(file.read_text("utf-8"))))
            except (OSError, ValueError) as exc:
                log.warning("simulated scheduler: %s skipped: %s", file.name, exc)
            finally:
                file.unlink(missing_ok=True)
        return out

    @staticmethod
    def _parse(data: object) -> tuple[str, float, list[list[str]]]:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        cluster, ts, commands = data.get("cluster"), data.get("ts"), data.get("commands")
        if not isinstance(cluster, str) or not cluster:
            raise ValueError("'cluster' must be a cluster name")
        if not isinstance(ts, int | float) or isinstance(ts, bool):
            raise ValueError("'ts' must be a time in epoch seconds")
        if not isinstance(commands, list) or not all(
            isinstance(c, list) and c and all(isinstance(a, str) for a in c) for c in commands
        ):
            raise ValueError("'commands' must be a list of argv lists of strings")
        return cluster, float(ts), commands
