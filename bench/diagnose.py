"""Log diagnosis throughput against `grep -E` with the same patterns, on the same file, in one run.

    .venv/bin/python bench/diagnose.py [--mb 10] [--repeat 3]

Builds a ~10 MB realistic failed-job log (Megatron/DeepSpeed step lines, NCCL INFO, warnings,
benign errors, then NCCL watchdog timeouts on every rank with an Xid 79 on one node), then:
  1. vigil: the full diagnosis (`diagnose_paths`: scan, classify, window, ordering, blame);
  2. grep: `LC_ALL=C grep -E -i -c -f PATTERNS FILE` with every pattern of rules.yaml.
Best of --repeat runs each, the two alternating so that both see the same machine (file in the
page cache for both). Last line: JSON with mb_per_s, grep_mb_per_s, ratio (vigil / grep),
seconds_10mb. Not a test: it never fails on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.failures.make_corpus import noise, watchdog_all  # noqa: E402
from webapp.failures.diagnosis import catalogue_load, diagnose_paths, grep_patterns  # noqa: E402

MB = 1_000_000


def build_log(path: Path, size_mb: float) -> None:
    r = random.Random(42)
    target = int(size_mb * MB)
    with open(path, "w", encoding="utf-8") as f:
        written, t = 0, -50_000
        while written < target:
            block = "\n".join(noise(r, 2000, start=t)) + "\n"
            f.write(block)
            written += len(block.encode())
            t += 2000
        tail = [
            "May 07 03:09:41 node-06 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, "
            "GPU has fallen off the bus.",
            *watchdog_all(range(64)),
            "srun: error: node-01: task 0: Exited with exit code 1",
        ]
        f.write("\n".join(tail) + "\n")


def best_of_alternating(n: int, *fns) -> list[tuple[float, object]]:
    """Best wall time and last result of each function, over n rounds that run each once."""
    best = [(float("inf"), None)] * len(fns)
    for _ in range(n):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            result = fn()
            best[i] = (min(best[i][0], time.perf_counter() - t0), result)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="log size in MB")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("grep") is None:
        sys.exit("bench/diagnose.py: grep is needed for the baseline")

    tmp = Path(tempfile.mkdtemp(prefix="vigil-bench-diagnose-"))
    try:
        log = tmp / "job.log"
        build_log(log, args.mb)
        size = log.stat().st_size
        patterns = tmp / "patterns"
        patterns.write_text("\n".join(grep_patterns()) + "\n", encoding="utf-8")
        catalogue_load()  # parse the rules once, as a long-running worker would
        log.read_bytes()  # page cache

        env = {**os.environ, "LC_ALL": "C"}
        cmd = ["grep", "-E", "-i", "-c", "-f", str(patterns), str(log)]
        (t_vigil, diagnosis), (t_grep, proc) = best_of_alternating(
            args.repeat,
            lambda: diagnose_paths(log),
            lambda: subprocess.run(cmd, env=env, capture_output=True, text=True),
        )
        print(
            f"{size / MB:.1f} MB, {diagnosis.lines_scanned} lines: {diagnosis.cause} on "
            f"{diagnosis.blamed_node} ({diagnosis.rule_id}) in {t_vigil:.3f} s; grep -E "
            f"({len(grep_patterns())} patterns) matched {proc.stdout.strip()} lines in "
            f"{t_grep:.3f} s",
            file=sys.stderr,
        )
        mb_per_s = size / MB / t_vigil
        grep_mb_per_s = size / MB / t_grep
        print(
            json.dumps(
                {
                    "mb_per_s": round(mb_per_s, 1),
                    "grep_mb_per_s": round(grep_mb_per_s, 1),
                    "ratio": round(mb_per_s / grep_mb_per_s, 3),
                    "seconds_10mb": round(t_vigil * 10 * MB / size, 3),
                }
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
