#!/usr/bin/env python3
"""DCGM diagnostics on every node of a job: `dcgmi diag -r 2 -j` per node, one verdict each.

Run it as one batch job over the nodes to check (this is what Vigil's recovery submits):

    sbatch --parsable --export=NONE -N 4 -w n1,n2,n3,n4 --exclusive -o check.out dcgm_diag.py

or by hand, inside an allocation or with --nodes. Each node runs `srun -N1 -w <node> dcgmi
diag -r 2 -j` (in parallel); a node FAILs when any test result in dcgmi's JSON says Fail, with
the failing test's name. It prints one verdict line per node on stdout (README.md, "The line
protocol"):

    VIGIL-HEALTH <node> PASS [detail...]
    VIGIL-HEALTH <node> FAIL <detail...>

and exits 0 when every node passed, 1 when any failed, 2 on bad usage (no verdict lines).

Standard library only, Python 3.9+: sbatch copies this one file to the batch node, so it
imports nothing of Vigil (and repeats the few lines it shares with nccl_pairwise.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

LINE_PREFIX = "VIGIL-HEALTH"
# Level 2 ("medium") is DCGM's suggested epilogue after a failure and normally lasts about
# two minutes (DCGM user guide, "DCGM Diagnostics"; dcgmi-diag reference, --run).
DEFAULT_LEVEL = 2
# Twice the longest level-2 runs seen, plus srun's launch.
DEFAULT_TIMEOUT_S = 600
KILL_GRACE_S = 10
DETAIL_MAX_CHARS = 300
WARNING_MAX_CHARS = 120

# The document's top key: "DCGM Diagnostic" from DCGM 4 (testing/python3/dcgm_diag_schema.json
# in NVIDIA/DCGM), "DCGM GPU Diagnostic" in DCGM 3 (nvvs/src/tests/JsonResultTests.cpp).
ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
COUNT_WORDS = {
    "pass": "passed",
    "fail": "failed",
    "skip": "skipped",
    "warn": "passed with warnings",
    "other": "not run",
}


def diag_verdict(output: str, returncode: int) -> tuple[bool, str]:
    """PASS/FAIL and its detail from what `dcgmi diag -j` printed and its exit status.

    FAIL when a test result (or a test's summary) says Fail, naming the test and the entity;
    when dcgmi reports a runtime error, prints no JSON, or ran no test; or when it exits
    non-zero although no test failed. Skip and Warn do not fail a node.
    """
    document = _json_document(output)
    if document is None:
        why = _last_line(output) or "no output"
        return False, f"dcgmi diag printed no JSON result (exit {returncode}): {why}"
    root = next((document[k] for k in ROOT_KEYS if isinstance(document.get(k), dict)), None)
    if root is None:
        error = document.get("runtime_error") or document.get("error")
        if error:
            return False, f"dcgmi diag runtime error: {error}"
        return False, f"dcgmi diag JSON has none of {', '.join(ROOT_KEYS)} (exit {returncode})"
    if root.get("runtime_error"):
        return False, f"dcgmi diag runtime error: {root['runtime_error']}"
    counts = {"pass": 0, "fail": 0, "skip": 0, "warn": 0, "other": 0}
    failures: list[str] = []
    for category in _objects(root.get("test_categories")):
        for test in _objects(category.get("tests")):
            name = str(test.get("name") or "unnamed test")
            failed_here = [
                _entity(result) + _first_warning(result)
                for result in _objects(test.get("results"))
                if _status(result) == "fail"
            ]
            summary = test.get("test_summary")
            summary_failed = isinstance(summary, dict) and _status(summary) == "fail"
            if failed_here or summary_failed:
                failures.append(f"{name} ({'; '.join(failed_here)})" if failed_here else name)
                counts["fail"] += 1
            else:
                statuses = {_status(r) for r in _objects(test.get("results"))}
                status = next((s for s in ("warn", "pass", "skip") if s in statuses), "other")
                counts[status] += 1
    tested = sum(counts.values())
    if failures:
        return False, f"dcgmi diag: {', '.join(failures)} failed"
    if tested == 0:
        return False, f"dcgmi diag ran no test (exit {returncode})"
    summary = ", ".join(f"{n} {COUNT_WORDS[word]}" for word, n in counts.items() if n)
    if returncode != 0:
        return False, f"dcgmi diag exited {returncode} though no test failed ({summary})"
    return True, f"dcgmi diag: {summary}"


def _json_document(output: str) -> dict | None:
    """The JSON object in dcgmi's output; a line may come before it (DCGM 3 prints a banner)."""
    start, end = output.find("{"), output.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        document = json.loads(output[start : end + 1])
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _objects(value: object) -> list[dict]:
    """The objects of a JSON list (DCGM 3 puts nulls between tests)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _status(result: dict) -> str:
    """'pass', 'fail', 'skip', 'warn' or another word: DCGM writes Pass, PASS, Fail, ..."""
    return str(result.get("status", "")).strip().lower()


def _entity(result: dict) -> str:
    """Which device a result is about: 'GPU 3' (DCGM 4 entities, DCGM 3 gpu_ids)."""
    if "entity_id" in result:
        return f"{result.get('entity_group', 'entity')} {result['entity_id']}"
    for key in ("gpu_ids", "gpu_id"):
        if key in result:
            return f"GPU {result[key]}"
    return "all"


def _first_warning(result: dict) -> str:
    for warning in result.get("warnings") or []:
        text = warning.get("warning") if isinstance(warning, dict) else warning
        if text:
            text = " ".join(str(text).split())
            cut = text if len(text) <= WARNING_MAX_CHARS else text[: WARNING_MAX_CHARS - 3] + "..."
            return f": {cut}"
    return ""


def diag_command(node: str, args: argparse.Namespace) -> list[str]:
    return [
        "srun",
        "-N1",
        "-n1",
        "-w",
        node,
        *shlex.split(args.srun_args),
        args.dcgmi,
        "diag",
        "-r",
        str(args.level),
        "-j",
    ]


def node_verdict(node: str, args: argparse.Namespace) -> tuple[bool, str]:
    command = diag_command(node, args)
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group, so a timeout stops all of it
        )
    except OSError as exc:
        return False, f"could not run {command[0]}: {exc.strerror}"
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        return False, f"dcgmi diag timed out after {args.timeout_s} s"
    passed, detail = diag_verdict(stdout, proc.returncode)
    if not passed and _json_document(stdout) is None and stderr.strip():
        detail = f"dcgmi diag printed no JSON result (exit {proc.returncode}): {_last_line(stderr)}"
    return passed, detail


# --- shared with nccl_pairwise.py: each script is copied alone by sbatch, so each has its copy;
# tests/deploy/test_healthcheck.py checks that the copies agree ---------------------------------


def health_line(node: str, passed: bool, detail: str) -> str:
    """One line of the protocol: no newline or tab inside, the detail cut to a readable size."""
    detail = " ".join(detail.split())
    if len(detail) > DETAIL_MAX_CHARS:
        detail = detail[: DETAIL_MAX_CHARS - 3] + "..."
    return f"{LINE_PREFIX} {node} {'PASS' if passed else 'FAIL'} {detail}".rstrip()


def _stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.communicate(timeout=KILL_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def job_nodes(nodes_arg: str) -> list[str]:
    """--nodes if given, else the nodes of the Slurm allocation this runs in."""
    if nodes_arg:
        return [n for n in (s.strip() for s in nodes_arg.split(",")) if n]
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return []
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.split()


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="dcgmi diag on every node of a job; prints "
        "'VIGIL-HEALTH <node> PASS|FAIL [detail]' per node."
    )
    parser.add_argument(
        "--nodes", default="", help="comma-separated nodes (default: the Slurm allocation's)"
    )
    parser.add_argument("--level", type=int, default=DEFAULT_LEVEL, choices=(1, 2, 3, 4))
    parser.add_argument("--timeout-s", type=int, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--dcgmi", default="dcgmi", help="the dcgmi command on the nodes")
    parser.add_argument("--srun-args", default="", help="extra srun options")
    args = parser.parse_args(argv)
    if args.timeout_s < 1:
        parser.error(f"--timeout-s must be at least 1, got {args.timeout_s}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        nodes = list(dict.fromkeys(job_nodes(args.nodes)))
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"dcgm_diag: cannot list the allocation's nodes: {exc}", file=sys.stderr)
        return 2
    if not nodes:
        print("dcgm_diag: no nodes: pass --nodes or run inside a Slurm allocation", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        outcomes = list(pool.map(lambda n: node_verdict(n, args), nodes))
    for i, node in enumerate(nodes):
        print(health_line(node, *outcomes[i]), flush=True)
    failed = [node for i, node in enumerate(nodes) if not outcomes[i][0]]
    print(
        f"dcgm_diag: {len(nodes)} nodes, {len(failed)} failed"
        + (f": {', '.join(failed)}" if failed else ""),
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
