"""Load an AcmeTrace job trace (the paper's public CSV) into Job rows of one cluster.

    manage.py import_acmetrace --cluster seren trace_seren.csv [--batch-size 100000]
        [--writers 2] [--no-progress]

A progress bar in bytes on stderr, the bad rows by line and a summary on stdout; the work is
webapp/jobs/trace_import.py's (`trace_import`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from tqdm import tqdm

from collectors.schema import NAME_PATTERN
from webapp.jobs.trace_import import WRITERS, TraceImportError, trace_import


def _cluster_name(text: str) -> str:
    if not re.fullmatch(NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid cluster name")
    return text


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class Command(BaseCommand):
    help = "Import an AcmeTrace job trace CSV (Seren or Kalos schema) into one cluster."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--cluster", required=True, type=_cluster_name, help="cluster name, e.g. seren"
        )
        parser.add_argument("file", help="the trace CSV (trace_seren.csv, trace_kalos.csv)")
        parser.add_argument(
            "--batch-size",
            type=_at_least_one,
            default=100_000,
            help="rows per transaction, at least (whole 4 MB blocks; default 100000)",
        )
        parser.add_argument(
            "--writers",
            type=_at_least_one,
            default=WRITERS,
            help=f"database connections storing in parallel (default {WRITERS}; "
            "one inside a transaction)",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")

    def handle(
        self, *args, cluster: str, file: str, batch_size: int, writers: int, **options
    ) -> None:
        bars: list[tqdm] = []  # made once the file is open: nothing drawn for a refused one

        def progress(done: int, size: int) -> None:
            if not bars:
                bars.append(
                    tqdm(
                        total=size,
                        unit="B",
                        unit_scale=True,
                        desc=f"import {Path(file).name}",
                        file=_Unstyled(self.stderr),
                        disable=options["no_progress"],
                        mininterval=0.5,
                    )
                )
            bars[0].update(done - bars[0].n)

        try:
            report = trace_import(
                file, cluster, batch_size=batch_size, writers=writers, progress=progress
            )
        except TraceImportError as exc:
            raise CommandError(str(exc)) from None
        finally:
            for bar in bars:
                bar.close()
        for line in report.lines():
            self.stdout.write(line)


class _Unstyled:
    """The command's stderr as tqdm writes to it: exactly the text given, unstyled (the
    wrapper would end every write with a newline and colour it as an error)."""

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out

    def write(self, text: str) -> None:
        self.out.write(text, style_func=str, ending="")

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name: str):
        return getattr(self.out, name)  # encoding, isatty: what tqdm asks of a terminal
