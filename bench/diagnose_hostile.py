"""Diagnosis time of crafted log lines against normal lines of the same size, in one run.

    .venv/bin/python bench/diagnose_hostile.py [--lines 400] [--kb 4] [--repeat 5]

A job chooses what its log holds, and every line that carries an anchor of rules.yaml is parsed
and matched. Crafted lines are built to make a backtracking matcher retry every split of a long
run: long host-like runs of letters and digits before no ": ", tqdm-like "1%|" runs with no
"]", and the head of each rule pattern that has a ".*" repeated across the line with its tail
never following. Normal lines are what failed jobs print, padded to the same size: long Python
exception messages, NCCL warnings, Slurm errors. Both logs have --lines distinct lines (no
verbatim repeat for the scan's cache to skip) and go through the full diagnosis
(`diagnose_text`). Best of --repeat runs each, the two alternating. Last line: JSON with
crafted_s, normal_s and ratio (crafted / normal; goal: at most 3). Not a test: it never fails
on timing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webapp.failures.diagnosis import catalogue_load, diagnose_text  # noqa: E402


def _fill(head: str, unit: str, tail: str, size: int) -> str:
    """head + unit repeated + tail, `size` characters long."""
    room = max(0, size - len(head) - len(tail))
    return head + (unit * (room // len(unit) + 1))[:room] + tail


def crafted_units() -> list[str]:
    """Runs that make a backtracking matcher quadratic (each followed by " error", an anchor)."""
    units = ["a1", "1%|", "1%||", "[rank", "Rank ", "peer a", "x:1", "1" * 7 + "."]
    # The metrics records read at the end of the log (diagnosis/metrics.py): keys of long
    # words, values of long digit runs, fields that never end in a value.
    units += ["lossa", "loss 1", "loss: a", "loss=1, ", "'loss': 1e", "skipped=1 a"]
    # A traceback flattened into one line is read as many (lines.unflattened): as many
    # escaped line breaks as the line holds (distinct exception lines: flat_traceback below).
    units.append("Traceback (most recent call last):\\n\\n")
    for rule in catalogue_load().line_rules:
        for pattern in rule.patterns:
            m = re.search(r"\.\*|\[\^[^\]]*\]\*", pattern)
            if m is None:
                continue
            head = re.sub(r"\\(.)", r"\1", pattern[: m.start()])
            head = re.sub(r"[\[\]()?|+*^$]", "", head)
            if head:
                units.append(head + " ")
    return units


def flat_traceback(i: int, size: int) -> str:
    """One line holding an escaped traceback of distinct exception lines (none repeats, so the
    scan's cache of parsed lines skips none), `size` characters long."""
    text, j = f"{i} Traceback (most recent call last):\\n", 0
    while len(text) < size:
        text += f"E{i}x{j}Error: value out of range\\n"
        j += 1
    return text[: size - 1] + "\n"


def crafted_log(lines: int, size: int) -> str:
    units = crafted_units()
    kinds = len(units) + 1
    return "".join(
        flat_traceback(i, size)
        if i % kinds == len(units)
        else _fill(f"{i} ", units[i % kinds], " error\n", size)
        for i in range(lines)
    )


NORMAL = [
    "[rank{i}]: RuntimeError: Error(s) in loading state_dict for GPT: size mismatch for layer "
    "{i}.weight: copying a param with shape torch.Size([4096, 4096]) from checkpoint, ",
    "node-{i}:81234:81301 [2] transport/net_ib.cc:1712 NCCL WARN NET/IB : Got completion from "
    "peer 10.20.1.{i}<59412> with status=12 opcode=0 len=0 vendor err 129 (Recv) ",
    "2024-05-07T03:12:{s:02d} gpu-{i}: srun: error: gpu-{i}: task {i}: Exited with exit code 1 ",
    "[E0507 03:12:{s:02d}.000000 {i} ProcessGroupNCCL.cpp:1414] [PG 0 Rank {i}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={i}, OpType=ALLREDUCE) ran for 600000 ms ",
    "ValueError: expected sequence of length {i} at dim 1 (got 512) while collating the batch ",
]
# Words of a long exception message (what pads a normal line to the size of a crafted one).
WORDS = "while processing batch {i} of shard /data/train-{i:05d}.jsonl the value was out of range "


def normal_log(lines: int, size: int) -> str:
    out = []
    for i in range(lines):
        head = NORMAL[i % len(NORMAL)].format(i=i, s=i % 60)
        out.append(_fill(head, WORDS.format(i=i), "\n", size))
    return "".join(out)


def best_of_alternating(n: int, *fns) -> list[float]:
    """Best wall time of each function, over n rounds that run each once."""
    best = [float("inf")] * len(fns)
    for _ in range(n):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--kb", type=float, default=4.0, help="size of every line in KB")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    size = int(args.kb * 1000)
    catalogue_load()  # parse the rules once, as a long-running worker would
    crafted, normal = crafted_log(args.lines, size), normal_log(args.lines, size)
    t_crafted, t_normal = best_of_alternating(
        args.repeat, lambda: diagnose_text(crafted), lambda: diagnose_text(normal)
    )
    print(
        f"{args.lines} lines of {size} B: crafted {t_crafted:.3f} s "
        f"({len(crafted_units())} shapes), normal {t_normal:.3f} s "
        f"(normal diagnosed {diagnose_text(normal).cause})",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                "lines": args.lines,
                "line_bytes": size,
                "crafted_s": round(t_crafted, 4),
                "normal_s": round(t_normal, 4),
                "ratio": round(t_crafted / t_normal, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
