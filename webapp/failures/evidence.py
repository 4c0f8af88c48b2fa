"""What the diagnosis engine reads for one failure, built from the database (reads only).

A job failure reads its job's log windows (as the node agents sent them), the kernel Xid events
of its nodes (GpuErrorEvent rows from the agents' kernel-log and NVML watchers, rendered as the
kernel lines the driver prints) and the scheduler's end line; a GPU error reads its burst of
Xids. Only the kernel and scheduler streams may carry kernel evidence: a kernel-looking line
inside a job's own log is text the job printed (diagnosis/scan.py), never hardware evidence.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import NamedTuple

from webapp.core.units import iso_utc
from webapp.failures import diagnosis as engine
from webapp.failures import taxonomy
from webapp.failures.choices import GpuErrorKind

# A gpu_error failure is diagnosed from its GPU's burst (GpuErrorEvent.burst).
from webapp.failures.models import (
    FailureEvent,
    FailureKind,
    GpuErrorEvent,
    JobLogWindow,
)
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Node
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job, JobAllocation
from webapp.telemetry.selectors import gpu_sample_latest

# The diagnosis window of docs/failure-taxonomy.md step 1, widened by the engine for long NCCL
# timeouts: kernel events this far before the end are handed to it (it keeps what fits).
EVIDENCE_BEFORE = timedelta(minutes=45)
EVIDENCE_AFTER = timedelta(seconds=engine.WINDOW_AFTER_S)
# NVIDIA's catalog: Xid 48 (double-bit ECC) follows WORKFLOW_XID_48, which reads the row remap.
XID_DOUBLE_BIT_ECC = 48


class EvidenceStream(NamedTuple):
    """One named stream of lines, and whether it may carry kernel evidence."""

    name: str
    lines: list[str]
    kernel_evidence: bool
    host: str | None = None  # the node whose agent shipped the lines (a job log window)


@dataclass(frozen=True)
class EngineInput:
    """What the engine reads for one failure: named streams of lines and the job's nodes."""

    streams: list[EvidenceStream]
    job_nodes: list[str]

    def as_streams(self) -> list[engine.LogStream]:
        return [
            engine.LogStream(
                s.name, io.BytesIO("\n".join(s.lines).encode() + b"\n"), s.kernel_evidence, s.host
            )
            for s in self.streams
        ]


def failure_evidence(failure: FailureEvent) -> EngineInput:
    """The engine's input for one failure (job log windows must already be attached to the
    job: services.job_log_windows_attach)."""
    if failure.kind == FailureKind.JOB_FAILURE and failure.job is not None:
        return _job_input(failure.job)
    if failure.kind == FailureKind.GPU_ERROR and failure.gpu_error is not None:
        return _gpu_error_input(failure)
    return EngineInput([], [])


def xid_line(e: GpuErrorEvent, hostname: str, remap_state: str | None = None) -> str:
    """A GPU error event as the kernel log line the driver prints for it (what rules read).
    `remap_state` (an Xid 48's GPU: "pending" or "failure") rides along in the line, where
    the taxonomy reads it (taxonomy.remap_note)."""
    info = taxonomy.xid_info(e.xid)
    pci = e.pci_bus_id or (f"GPU{e.gpu_index}" if e.gpu_index is not None else "unknown")
    meaning = e.message.strip() or info.meaning
    count = f" [x{e.count}]" if e.count > 1 else ""
    remap = f" {taxonomy.remap_note(remap_state)}" if remap_state else ""
    return (
        f"{iso_utc(e.ts, 'seconds')} {hostname} kernel: NVRM: Xid (PCI:{pci}): {e.xid}, "
        f"{meaning}{count}{remap}"
    )


def gpu_remap_state(gpu_id: int | None) -> str | None:
    """The GPU's row-remap state from the agent's newest sample: "failure" (no spare row
    left), "pending" (a remap waits for a reset), else None (none pending, or not sampled)."""
    if gpu_id is None:
        return None
    _, values = gpu_sample_latest(gpu_id)
    if values.get("remap_failure") == 1:
        return "failure"
    if values.get("remap_pending") == 1:
        return "pending"
    return None


def _xid_lines(errors, hosts: dict[int, str]) -> list[str]:
    """The kernel lines of GPU error events; an Xid 48 carries its GPU's row-remap state
    (NVIDIA's Xid 48 workflow decides reset or escalate by it)."""
    states: dict[int | None, str | None] = {}
    lines = []
    for e in errors:
        state = None
        if e.xid == XID_DOUBLE_BIT_ECC:
            if e.gpu_id not in states:
                states[e.gpu_id] = gpu_remap_state(e.gpu_id)
            state = states[e.gpu_id]
        lines.append(xid_line(e, hosts[e.node_id], state))
    return lines


def scheduler_end_line(job: Job, hostname: str | None) -> str:
    """The line Slurm writes at the end of a job in this state (docs/failure-signatures.md s7).

    `hostname`: the node the line is about; None when it is not known (a multi-node job's
    NODE_FAIL with no node down), so that the engine blames no node rather than a wrong one.
    """
    at = iso_utc(job.end_at, "seconds")
    stamp = job.end_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if hostname is None:
        head = f"{at} slurmctld: error: *** JOB {job.scheduler_id}"
        hostname = "unknown"
    else:
        head = f"{at} {hostname} slurmstepd: error: *** JOB {job.scheduler_id} ON {hostname}"
    if job.state == JobState.NODE_FAIL:
        return f"{head} CANCELLED AT {stamp} DUE TO NODE FAILURE ***"
    if job.state == JobState.TIMEOUT:
        return f"{head} CANCELLED AT {stamp} DUE TO TIME LIMIT ***"
    if job.state == JobState.OUT_OF_MEMORY:
        return (
            f"{at} {hostname} slurmstepd: error: Detected 1 oom_kill event(s) in StepId="
            f"{job.scheduler_id}.0. Some of your processes may have been killed by the cgroup "
            "out-of-memory handler."
        )
    code = job.exit_code if job.exit_code is not None else 1
    return f"{at} {hostname} srun: error: {hostname}: task 0: Exited with exit code {code}"


def _job_input(job: Job) -> EngineInput:
    nodes = dict(
        Node.objects.filter(
            id__in=JobAllocation.objects.filter(job=job).values("node_id")
        ).values_list("id", "hostname")
    )
    streams: list[EvidenceStream] = []
    start = job.start_at or job.end_at - EVIDENCE_BEFORE
    windows = JobLogWindow.objects.filter(job=job, ts__lte=job.end_at + EVIDENCE_AFTER)
    for w in windows.select_related("node").order_by("node__hostname", "path", "first_line_no"):
        nodes.setdefault(w.node_id, w.node.hostname)
        name = f"{w.node.hostname}:{w.path}:{w.first_line_no}"
        streams.append(
            EvidenceStream(name, list(w.lines), kernel_evidence=False, host=w.node.hostname)
        )
    # An Xid shortly before the start still explains a job that died at once (the GPU fell
    # off the bus as it was handed over): the taxonomy's 15-minute window reaches back that far.
    lo = max(start - timedelta(seconds=engine.WINDOW_BEFORE_S), job.end_at - EVIDENCE_BEFORE)
    errors = GpuErrorEvent.objects.filter(
        node_id__in=list(nodes), last_ts__gte=lo, ts__lte=job.end_at + EVIDENCE_AFTER
    ).order_by("ts", "id")
    # A rise of the corrected (single-bit) ECC counter is not the driver's Xid 92 (a high
    # corrected-error rate): it explains no failure (node_events._critical).
    kernel = _xid_lines([e for e in errors if e.xid and e.kind != GpuErrorKind.ECC_SBE], nodes)
    end_line = scheduler_end_line(job, _end_line_host(job, nodes))
    streams.append(EvidenceStream("scheduler", [end_line], kernel_evidence=True))
    if kernel:
        streams.append(EvidenceStream("kernel", kernel, kernel_evidence=True))
    return EngineInput(streams, sorted(nodes.values()))


def _end_line_host(job: Job, nodes: dict[int, str]) -> str | None:
    """The node a NODE_FAIL is about: the job's only node, else its only node that is down or
    stale in the fleet; None if that is not clear. Other states: the first node (the line
    only dates the end)."""
    if not nodes:
        return None
    if job.state != JobState.NODE_FAIL or len(nodes) == 1:
        return sorted(nodes.values())[0]
    down = list(
        Node.objects.filter(
            id__in=list(nodes), state__in=[NodeState.DOWN, NodeState.STALE]
        ).values_list("hostname", flat=True)
    )
    return down[0] if len(down) == 1 else None


def _gpu_error_input(failure: FailureEvent) -> EngineInput:
    host = failure.node.hostname if failure.node else "unknown"
    burst = [x for x in failure.gpu_error.burst().rows if x.xid]
    kernel = _xid_lines(burst, {failure.node_id: host})
    return EngineInput([EvidenceStream("kernel", kernel, kernel_evidence=True)], [host])
