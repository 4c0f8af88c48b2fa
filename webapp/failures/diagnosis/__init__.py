"""Deterministic failure diagnosis: logs in, one Diagnosis out. Plain functions, no Django.

Pipeline (docs/failure-taxonomy.md "Ordering"), one module per step:
- catalogue.py: rules.yaml validated and compiled; the first rule a message matches;
- lines.py: one line stripped of its prefixes (time, host, rank, program), and the lines of a
  traceback printed as one escaped line;
- events.py: a matched line becomes an event (cause, tier, node, GPU, rank, time);
- scan.py: each input streamed in chunks through a literal prefilter, only the lines worth
  parsing decoded; whether an input may carry kernel evidence is a property of the input;
- divergence.py: loss_nan events from the numbers at the end of a log (loss curve, grad
  norms, loss scaler, metrics records);
- decide.py: window, coalescing, ordering, blame and confidence over what the scan found.

Empty or binary input gets `unknown` with a reason. This module holds the entry points and
re-exports the names callers use, so they import from `webapp.failures.diagnosis`; the
modules' own constants are imported from their module.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from webapp.failures.diagnosis.catalogue import (
    RULES_PATH,
    Catalogue,
    RuleError,
    catalogue_load,
    catalogue_parse,
    grep_patterns,
)
from webapp.failures.diagnosis.decide import (
    BLAME_JOB_LOG,
    BLAME_NODE_AGENT,
    BLAME_SCHEDULER,
    EVIDENCE_LINES,
    WINDOW_AFTER_S,
    WINDOW_BEFORE_S,
    Diagnosis,
    decide,
)
from webapp.failures.diagnosis.events import (
    EVIDENCE_TEXT_CHARS,
    NAME_ONLY_CONFIDENCE,
    classify,
)
from webapp.failures.diagnosis.scan import (
    LogStream,
    Scan,
)

__all__ = [
    "BLAME_JOB_LOG",
    "BLAME_NODE_AGENT",
    "BLAME_SCHEDULER",
    "EVIDENCE_LINES",
    "EVIDENCE_TEXT_CHARS",
    "NAME_ONLY_CONFIDENCE",
    "RULES_PATH",
    "WINDOW_AFTER_S",
    "WINDOW_BEFORE_S",
    "Diagnosis",
    "LogStream",
    "RuleError",
    "catalogue_load",
    "catalogue_parse",
    "classify",
    "diagnose_paths",
    "diagnose_streams",
    "diagnose_text",
    "grep_patterns",
]


def diagnose_streams(
    streams: Iterable[LogStream | tuple[str, BinaryIO]],
    job_nodes: Iterable[str] | None = None,
    catalogue: Catalogue | None = None,
) -> Diagnosis:
    """Diagnose the inputs in order (the job log first, then e.g. kernel logs).

    A plain (name, binary stream) pair is a LogStream that may carry kernel evidence.
    """
    scan = Scan(catalogue or catalogue_load())
    for index, stream in enumerate(streams):
        name, data, kernel_evidence, host = LogStream(*stream)
        scan.scan(data, index, name, kernel_evidence, host)
    return decide(scan, job_nodes)


def diagnose_paths(
    log: str | os.PathLike[str],
    kernel_logs: Iterable[str | os.PathLike[str]] = (),
    job_nodes: Iterable[str] | None = None,
) -> Diagnosis:
    """Diagnose log files an operator names; raises OSError (naming the file) when one cannot
    be read. Every file may carry kernel evidence: a combined capture of ranks, scheduler and
    kernel lines diagnoses exactly like a job log plus `--kernel-log`."""
    paths = [Path(log), *(Path(p) for p in kernel_logs)]
    handles = []
    try:
        for p in paths:
            if p.is_dir():
                raise IsADirectoryError(f"{p} is a directory, not a log file")
            handles.append(LogStream(p.name, open(p, "rb")))  # noqa: SIM115 - closed below
        return diagnose_streams(handles, job_nodes)
    finally:
        for h in handles:
            h.data.close()


def diagnose_text(text: str | bytes, kernel_log: str | bytes | None = None, **kw: Any) -> Diagnosis:
    """Diagnose in-memory logs (tests, the LLM hook's replay), as diagnose_paths would."""

    def raw(t: str | bytes) -> bytes:
        return t.encode("utf-8") if isinstance(t, str) else t

    streams = [LogStream("log", io.BytesIO(raw(text)))]
    if kernel_log is not None:
        streams.append(LogStream("kernel-log", io.BytesIO(raw(kernel_log))))
    return diagnose_streams(streams, **kw)
