"""Slurm watcher: job events from `squeue` and `scontrol show job -d`, and node states from
`sinfo`.

Runs on one host per cluster where the Slurm client tools work (the controller or a login
node), polled by the agent loop. Each poll:

1. lists every job `squeue` knows (`-t all`, explicit `-O` fields ended by a separator drawn
   for this call, epoch times through `SLURM_TIME_FORMAT=%s`): state, times, nodes and, for a
   job that ended, its exit code. Slurm keeps a finished job listed for `MinJobAge` (300 s by
   default), longer than a poll interval, so a job that started and ended between two polls is
   still seen. (`squeue --json` prints the whole queue whatever the filters in 22.05; the
   jobcomp file is not read: a job name holding a newline writes forged records there, see
   slurmtext.py);
2. asks `scontrol show job -d <id>` once per run that started, for the GPU indices the job holds
   on each of its nodes (`GRES=gpu:2(IDX:0-1)`);
3. lists every node with `sinfo` (state with all its flags, reason, when the reason was set).

The changes become `JobEventIn` events (submitted, started with its allocation, requeued,
ended) and `NodeStateIn` states (a node whose Vigil state, up / draining / drained / down, or
reason changed: drained by hand or by Vigil, resumed, gone down), sent as one `JobEventBatch`
per poll. The first poll reports every node. What was reported is kept in a small JSON state
file, so a restarted watcher neither loses events nor repeats them (a repeat would be harmless:
the server keeps one event per job, kind and time, and a node state is a value, not a count).

Times: squeue and scontrol print epoch seconds because we set `SLURM_TIME_FORMAT=%s`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.schema import (
    MAX_NODE_STATES_PER_BATCH,
    SCHEMA_VERSION,
    JobEventBatch,
    JobEventIn,
    JobGpus,
    NodeStateIn,
    clean_text,
    new_batch_id,
)
from collectors.watchers.slurmtext import (
    FORGET_AFTER_S,
    STARTED_STATES,
    WAITING_STATES,
    Runner,
    SlurmError,
    SlurmJob,
    end_state,
    field_separator,
    node_state_of,
    parse_scontrol_job,
    parse_sinfo,
    parse_squeue,
    run_command,
    sinfo_args,
    squeue_args,
)

log = logging.getLogger("vigil.collector.slurm")


# --- The watcher ---------------------------------------------------------------------------


@dataclass
class _Known:
    """What the watcher reported about one job (persisted in the state file)."""

    info: dict[str, Any] = field(default_factory=dict)
    sent: list[list[Any]] = field(default_factory=list)  # [kind, ts] pairs already reported
    run_start: float | None = None  # start of the run reported as started, not yet over
    ended: bool = False
    last_seen: float = 0.0

    def has(self, kind: str, ts: float | None) -> bool:
        return [kind, ts] in self.sent


class SlurmWatcher:
    """Polls Slurm and returns one JobEventBatch (JSON text) per poll with changes."""

    source = "slurm"

    def __init__(
        self,
        cluster: str,
        node: str,
        token: str,
        *,
        state_path: Path | None = None,
        interval_s: float = 0.0,
        runner: Runner = run_command,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.token = token
        self.state_path = state_path
        self.interval_s = interval_s
        self.run = runner
        self.jobs: dict[str, _Known] = {}
        # node -> [state, reason, since] as last reported
        self.nodes: dict[str, list[Any]] = {}
        self._last_poll: float | None = None
        self.events_sent = 0
        self.node_states_sent = 0
        self._load_state()

    # State file -------------------------------------------------------------------------

    def _load_state(self) -> None:
        if self.state_path is None or not self.state_path.exists():
            return
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            self.jobs = {k: _Known(**v) for k, v in data.get("jobs", {}).items()}
            self.nodes = {k: list(v) for k, v in data.get("nodes", {}).items()}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("state file %s unreadable (%s); starting afresh", self.state_path, exc)
            self.jobs, self.nodes = {}, {}

    def _save_state(self) -> None:
        if self.state_path is None:
            return
        data = {
            "jobs": {k: v.__dict__ for k, v in self.jobs.items()},
            "nodes": self.nodes,
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(f".{self.state_path.name}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, self.state_path)

    # Polling ----------------------------------------------------------------------------

    def poll(self, ts: float | None = None) -> list[tuple[str, str]]:
        """One look at Slurm; [(batch_id, JobEventBatch JSON)] with the new events and node
        states (more than one batch only past MAX_NODE_STATES_PER_BATCH nodes), or []."""
        now = time.time() if ts is None else ts
        if self._last_poll is not None and now - self._last_poll < self.interval_s:
            return []
        self._last_poll = now
        events = self.collect(now)
        states = self.collect_nodes(now)
        out = []
        while events or states:
            batch = JobEventBatch(
                v=SCHEMA_VERSION,
                batch_id=new_batch_id(),
                cluster=self.cluster,
                node=self.node,
                token=self.token,
                sent_at=time.time(),
                source="slurm",
                events=events,
                node_states=states[:MAX_NODE_STATES_PER_BATCH],
            )
            self.events_sent += len(events)
            self.node_states_sent += len(batch.node_states)
            events, states = [], states[MAX_NODE_STATES_PER_BATCH:]
            out.append((str(batch.batch_id), batch.model_dump_json(exclude_none=True)))
        return out

    def commit(self) -> None:
        """Persist what was reported (call after the batch went to the transport or spool)."""
        self._save_state()

    def collect(self, now: float) -> list[JobEventIn]:
        """The new events since the last call (state updated in memory only)."""
        sep = field_separator()
        try:
            squeue = parse_squeue(self.run(squeue_args(sep)), sep)
        except SlurmError as exc:
            log.warning("squeue failed, skipping this poll: %s", exc)
            return []
        out: list[JobEventIn] = []
        present = set()
        for job in squeue:
            present.add(job.job_id)
            out.extend(self._from_squeue(job, now))
        self._forget(present, now)
        out.sort(key=lambda e: (e.ts, ("submitted", "started", "requeued", "ended").index(e.kind)))
        return out

    def collect_nodes(self, now: float) -> list[NodeStateIn]:
        """The nodes whose Vigil state or reason changed since the last call (all of them the
        first time); remembered in memory only, like the jobs."""
        sep = field_separator()
        try:
            nodes = parse_sinfo(self.run(sinfo_args(sep)), sep)
        except SlurmError as exc:
            log.warning("sinfo failed, node states wait for the next poll: %s", exc)
            return []
        out = []
        for node in nodes:
            state = node_state_of(node.slurm_state)
            if state is None:  # Slurm does not know yet (unknown): keep what was reported
                continue
            if not 1 <= len(node.name) <= 128:
                log.warning("sinfo: node name of %d characters skipped", len(node.name))
                continue
            reason = clean_text(node.reason)[:256]
            last = self.nodes.get(node.name)
            if last is not None and last[:2] == [state, reason]:
                continue
            # Since the reason was set (a drain's time), else since this poll saw the change;
            # never before what was sent last, so the server's "newer wins" keeps the order
            # even when the controller's clock and this host's differ.
            since = node.reason_ts if node.reason_ts is not None else now
            if last is not None:
                since = max(since, last[2])
            self.nodes[node.name] = [state, reason, since]
            out.append(NodeStateIn(node=node.name, state=state, reason=reason, since=since))
        listed = {node.name for node in nodes}
        for name in set(self.nodes) - listed:  # removed from slurm.conf
            del self.nodes[name]
        return out

    def _known(self, job: SlurmJob, now: float) -> _Known:
        known = self.jobs.setdefault(job.job_id, _Known())
        known.last_seen = now
        info = known.info
        limits = (("name", 256), ("user", 128), ("partition", 128), ("qos", 128), ("project", 128))
        for key, limit in limits:
            value = clean_text(getattr(job, key))  # a name may hold a newline
            if value:
                info[key] = value[:limit]
        if job.comment:
            info["comment"] = clean_text(job.comment)[:1024]
        # Slurm resets SubmitTime on requeue: keep the first one.
        if job.submit_ts is not None and info.get("submit_ts") is None:
            info["submit_ts"] = job.submit_ts
        if job.gpus is not None:
            info["gpus_requested"] = job.gpus
        if job.nodes:
            info["nodes_requested"] = job.nodes
        return known

    def _event(
        self, job_id: str, known: _Known, kind: str, ts: float, *, key: Any = "ts", **extra: Any
    ) -> JobEventIn:
        info = dict(known.info)
        submit = info.get("submit_ts")
        start = extra.get("start_ts")
        if submit is not None and start is not None and submit > start:
            info["submit_ts"] = start
        known.sent.append([kind, ts if key == "ts" else key])
        return JobEventIn(job_id=job_id, kind=kind, ts=ts, **info, **extra)  # type: ignore[arg-type]

    def _submitted(self, job: SlurmJob, known: _Known, now: float) -> list[JobEventIn]:
        # One per job whatever its submit time says (Slurm moves it on requeue).
        if known.has("submitted", None):
            return []
        ts = known.info.get("submit_ts") or now
        return [self._event(job.job_id, known, "submitted", ts, key=None)]

    def _started(self, job: SlurmJob, known: _Known, allocation: list[JobGpus]) -> list[JobEventIn]:
        start = job.start_ts
        if start is None or known.has("started", start):
            return []
        known.run_start = start
        return [
            self._event(job.job_id, known, "started", start, start_ts=start, allocation=allocation)
        ]

    def _requeued(self, job_id: str, known: _Known, ts: float) -> list[JobEventIn]:
        known.run_start = None
        if known.has("requeued", ts):
            return []
        return [self._event(job_id, known, "requeued", ts)]

    def _ended(self, job: SlurmJob, known: _Known, state: str) -> list[JobEventIn]:
        end = job.end_ts or job.start_ts or time.time()
        known.run_start = None
        known.ended = True
        if known.has("ended", end):
            return []
        started = bool(job.node_list) and job.start_ts is not None
        return [
            self._event(
                job.job_id,
                known,
                "ended",
                end,
                state=state,
                exit_code=job.exit_code,
                start_ts=job.start_ts if started else None,
                end_ts=end,
            )
        ]

    def _allocation_of(self, job: SlurmJob) -> list[JobGpus]:
        """GPUs per node from scontrol, for the nodes squeue gives the job; the node list with
        no indices where scontrol cannot say for sure."""
        try:
            detail = parse_scontrol_job(self.run(["scontrol", "show", "job", "-d", job.job_id]))
        except SlurmError as exc:
            log.info("scontrol show job %s: %s", job.job_id, exc)
            detail = None
        held = {} if detail is None else {a.node: a.gpu_indices for a in detail.allocation}
        if any(held.get(n) for n in job.node_list):
            return [JobGpus(node=n, gpu_indices=held.get(n, [])) for n in job.node_list]
        return [JobGpus(node=n, gpu_indices=[]) for n in job.node_list]

    def _from_squeue(self, job: SlurmJob, now: float) -> list[JobEventIn]:
        known = self._known(job, now)
        out = self._submitted(job, known, now)
        state = job.state.split(" ")[0]
        if state in STARTED_STATES and job.start_ts is not None:
            if known.ended and not known.has("started", job.start_ts):
                # Requeued after it ended (`scontrol requeue` of a failed job), running again.
                known.ended = False
                out += self._requeued(job.job_id, known, job.start_ts)
            elif known.run_start is not None and known.run_start != job.start_ts:
                # Requeued and started again between two polls.
                out += self._requeued(job.job_id, known, job.start_ts)
            if not known.has("started", job.start_ts):
                out += self._started(job, known, self._allocation_of(job))
        elif state in WAITING_STATES:
            if known.ended or known.run_start is not None:
                # Requeued (after it ended, or while it ran): its next run ends on its own.
                known.ended = False
                out += self._requeued(job.job_id, known, now)
        elif end_state(state) is not None and not known.ended:
            ran = bool(job.node_list) and job.start_ts is not None
            if ran and not known.has("started", job.start_ts):
                out += self._started(job, known, [JobGpus(node=n) for n in job.node_list])
            out += self._ended(job, known, end_state(state) or "FAILED")
        return out

    def _forget(self, present: Iterable[str], now: float) -> None:
        present = set(present)
        for job_id in list(self.jobs):
            known = self.jobs[job_id]
            if job_id in present:
                continue
            if known.ended or now - known.last_seen > FORGET_AFTER_S:
                del self.jobs[job_id]
