"""`diagnose LOGFILE [--kernel-log FILE] [--nodes N1,N2] [--json]`: one log file, offline.

Shared by `manage.py diagnose` and `python -m webapp.failures.cli` (no Django needed). Exit
status 0 with a diagnosis (`unknown` included), 2 with one line on stderr when a file cannot
be read: errors are part of the interface.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from webapp.failures.diagnosis import Diagnosis, diagnose_paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logfile", help="job log, or one combined capture of ranks, scheduler and kernel lines"
    )
    parser.add_argument(
        "--kernel-log",
        action="append",
        default=[],
        metavar="FILE",
        help="dmesg / journalctl -k output of the job's nodes (repeatable)",
    )
    parser.add_argument(
        "--nodes",
        default="",
        help="comma-separated nodes of the allocation: kernel lines of other hosts are ignored",
    )
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")


def run(options: dict, stdout: TextIO, stderr: TextIO) -> int:
    """Diagnose as the parsed options say; write the answer; return the exit status."""
    nodes = [n.strip() for n in (options.get("nodes") or "").split(",") if n.strip()]
    try:
        result = diagnose_paths(options["logfile"], options.get("kernel_log") or (), nodes or None)
    except OSError as exc:
        stderr.write(
            f"diagnose: cannot read {exc.filename or options['logfile']}: {exc.strerror or exc}\n"
        )
        return 2
    if options.get("json"):
        stdout.write(json.dumps(result.as_dict(), ensure_ascii=False) + "\n")
    else:
        stdout.write(render_text(result))
    return 0


def render_text(d: Diagnosis) -> str:
    """The human form: cause line, blame, action, then the evidence lines."""
    out = [
        f"cause:      {d.cause} ({d.category})  confidence {d.confidence:.2f}",
        f"detail:     {d.detail}",
        f"action:     {d.action}",
    ]
    if d.acme_alias:
        out.append(f"acme alias: {d.acme_alias}")
    blamed = ", ".join(
        part
        for part in (
            f"node {d.blamed_node}" if d.blamed_node else "",
            f"GPU {d.blamed_gpu}" if d.blamed_gpu else "",
            f"rank {d.blamed_rank}" if d.blamed_rank is not None else "",
        )
        if part
    )
    out.append(f"blamed:     {blamed or '-'}")
    out.append(f"rule:       {d.rule_id or '-'}")
    if d.symptoms:
        out.append(f"also seen:  {', '.join(d.symptoms)}")
    for note in d.notes:
        out.append(f"note:       {note}")
    if d.evidence:
        out.append("evidence:")
        out.extend(f"  {e.file}:{e.line}: {e.text}" for e in d.evidence)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="diagnose", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(vars(parser.parse_args(argv)), sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
