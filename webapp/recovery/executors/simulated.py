"""The demo's executor: Slurm's command lines, recorded and answered without a scheduler.

`make demo` runs a simulated cluster with no Slurm; the simulator honours what the recovery
services record for a simulated action (the node shows as drained in Vigil, the job as
requeued). Every page labels these actions as simulated.
"""

from __future__ import annotations

from collections.abc import Sequence

from webapp.recovery.executors.base import CommandResult, Target
from webapp.recovery.executors.slurm import SlurmExecutor


class SimulatedExecutor(SlurmExecutor):
    kind = "simulated"
    simulated = True

    def run(self, argv: Sequence[str], target: Target) -> CommandResult:
        return CommandResult(tuple(argv), 0, "simulated: no scheduler was contacted\n", "")

    def before(self, argv: Sequence[str], target: Target) -> dict:
        return {}

    def done(self, argv: Sequence[str], target: Target, before: dict) -> bool:
        return True

    def followups(self, target: Target, results: Sequence[CommandResult]) -> dict:
        if target.kind != "health_check":
            return {}
        hosts = list(target.params.get("hosts", []))
        return {
            "failed": [],
            "verdicts": {h: {"passed": True, "detail": "simulated"} for h in hosts},
        }
