"""A stand-in evaluation program for the Slurm tests: it sleeps its phases (the seconds the
planner gave it, scaled down by the test) and writes the phase report the executor reads
(webapp/evaluation/slurm.py has the contract).

A dataset named `fail-always...` makes the job exit 1; `fail-once...` exits 1 the first time
(a marker file in the outputs folder remembers it), as a flaky node would.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

PHASES = {"coupled": ("load", "infer", "metrics"), "load": ("load",), "metrics": ("metrics",)}


def main() -> int:
    p = argparse.ArgumentParser()
    for opt in ("--phase", "--model", "--datasets", "--outputs", "--report"):
        p.add_argument(opt, required=True)
    for opt in ("--load-s", "--infer-s", "--metrics-s"):
        p.add_argument(opt, type=float, default=0.0)
    a = p.parse_args()
    names = [d.split(":")[0] for d in a.datasets.split(",") if d]
    outputs = Path(a.outputs)
    for name in names:
        if name.startswith("fail-always"):
            return 1
        marker = outputs / f"{name}.{a.phase}.failed-once"
        if name.startswith("fail-once") and not marker.exists():
            marker.touch()
            return 1
    seconds = {"load": a.load_s, "infer": a.infer_s, "metrics": a.metrics_s}
    report: dict[str, list[float]] = {}
    for phase in PHASES.get(a.phase, ("load", "infer")):
        start = time.time()
        time.sleep(seconds[phase])
        report[phase] = [start, time.time()]
    if a.phase in ("coupled", "infer"):
        for name in names:
            (outputs / f"{name}.{a.phase}.out").write_text("generated\n")
    # The names of the variables it was given, for a test that none of Vigil's reached it.
    Path(a.report).write_text(json.dumps({"phases": report, "env": sorted(os.environ)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
