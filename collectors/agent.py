"""The agent loop: sample every interval, group rounds into batches, hand batches to a sink.

One batch per node per `intervals_per_batch` rounds (one Celery task each on the broker). The
loop keeps its rhythm on the wall clock; in "backfill" mode (the simulator with --count) it
runs as fast as it can and stamps rounds in the past, ending one interval before now, because
the server refuses timestamps more than 300 s in the future.

Job watchers (collectors/watchers: Slurm, the simulator's job model) are polled once per round
after the sampling, in the same thread, so the transport is never used from two threads; their
JobEventBatch texts go to `job_sink`. Node-event watchers (collectors/watchers/nodeevents.py:
Xids, kernel log, counter increases, job log windows) are polled right after them, see the
round's readings first (`observe`, for the counter increases) and send NodeEventBatch texts to
`event_sink` (task `schema.NODE_EVENTS_TASK`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from collectors.backends.base import Backend, NodeReading
from collectors.schema import SCHEMA_VERSION, GpuInfo, new_batch_id
from collectors.watchers import JobWatcher

_index_ts = itemgetter(0, 1)  # (GPU index, ts) of a sample row

log = logging.getLogger("vigil.collector")

Sink = Callable[[str, str], None]
"""Receives (batch_id, batch JSON text) for each finished batch."""

TokenLookup = Callable[[str, str], str]
"""(cluster, node) -> the node's token."""


def gpu_info_dicts(gpus: list[GpuInfo]) -> list[dict[str, Any]]:
    return [g.model_dump(exclude_none=True) for g in gpus]


def batch_json(
    *,
    cluster: str,
    node: str,
    token: str,
    source: str,
    gpus: list[dict[str, Any]],
    samples: list[list[Any]],
    node_samples: list[list[Any]],
    batch_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[str, str]:
    """(batch_id, JSON text) of one wire-schema batch."""
    batch_id = batch_id or new_batch_id()
    batch = {
        "v": SCHEMA_VERSION,
        "batch_id": batch_id,
        "cluster": cluster,
        "node": node,
        "token": token,
        "sent_at": time.time() if sent_at is None else sent_at,
        "source": source,
        "gpus": gpus,
        "samples": samples,
        "node_samples": node_samples,
    }
    # allow_nan=False: a NaN that slipped through must fail here, not reject the batch later.
    return batch_id, json.dumps(batch, separators=(",", ":"), allow_nan=False)


@dataclass
class _Pending:
    gpus: list[GpuInfo]
    gpu_dicts: list[dict[str, Any]]
    samples: list[list[Any]] = field(default_factory=list)
    node_samples: list[list[Any]] = field(default_factory=list)
    rounds: int = 0


class Agent:
    def __init__(
        self,
        backend: Backend,
        tokens: TokenLookup,
        sink: Sink,
        *,
        interval_s: float = 10.0,
        intervals_per_batch: int = 1,
        on_round: Callable[[], None] | None = None,
        watchers: list[JobWatcher] | None = None,
        job_sink: Sink | None = None,
        event_watchers: list[JobWatcher] | None = None,
        event_sink: Sink | None = None,
    ) -> None:
        self.backend = backend
        self.watchers = list(watchers or [])
        self.job_sink = job_sink or sink
        self.job_batches = 0
        self.event_watchers = list(event_watchers or [])
        self.event_sink = event_sink or sink
        self.event_batches = 0
        self.tokens = tokens
        self.sink = sink
        self.interval_s = interval_s
        self.intervals_per_batch = intervals_per_batch
        self.on_round = on_round
        self.stop_event = threading.Event()
        self.rounds = 0
        self.batches = 0
        self._pending: dict[tuple[str, str], _Pending] = {}

    def stop(self) -> None:
        self.stop_event.set()

    def run(self, count: int | None = None, *, backfill: bool = False) -> None:
        """Sample `count` rounds (forever if None), then send what is still buffered."""
        try:
            if backfill and count is not None:
                t0 = time.time() - count * self.interval_s
                for k in range(count):
                    if self.stop_event.is_set():
                        break
                    self.round(t0 + k * self.interval_s)
            else:
                self._run_realtime(count)
        finally:
            self.flush()

    def replay_history(self, seconds: float, step_s: float, rounds_per_batch: int) -> int:
        """Sample the last `seconds` at once, `step_s` apart and `rounds_per_batch` rounds to a
        batch, and send it; how many rounds. For a simulated source: `run()` then carries on
        live from the same state, so the jobs running at the end of the history are still
        running (a separate `--count` run would end them, and a new simulator would start
        from an empty cluster)."""
        rounds = int(seconds // step_s)
        t0 = time.time() - rounds * step_s
        live, self.intervals_per_batch = self.intervals_per_batch, rounds_per_batch
        try:
            for k in range(rounds):
                if self.stop_event.is_set():
                    return k
                self.round(t0 + k * step_s)
        finally:
            self.intervals_per_batch = live
            self._emit_pending()
        return rounds

    def _run_realtime(self, count: int | None) -> None:
        next_tick = time.monotonic()
        done = 0
        while count is None or done < count:
            self.round(time.time())
            done += 1
            if count is not None and done >= count:
                break
            next_tick += self.interval_s
            delay = next_tick - time.monotonic()
            if delay < 0:
                # A round took longer than the interval: skip the missed ticks, keep rhythm.
                missed = int(-delay // self.interval_s) + 1
                log.warning("sampling fell %d interval(s) behind; skipping them", missed)
                next_tick += missed * self.interval_s
                delay = next_tick - time.monotonic()
            if self.stop_event.wait(max(delay, 0.0)):
                break

    def round(self, ts: float) -> None:
        """One sampling round at `ts`; emits the batches that are complete."""
        try:
            readings = self.backend.read(ts)
        except Exception as exc:  # noqa: BLE001 (a bad round must not end the agent)
            log.error("sampling failed at %.0f: %s: %s", ts, type(exc).__name__, exc)
            readings = []
        finally:
            if self.on_round is not None:
                self.on_round()
        self.rounds += 1
        for reading in readings:
            self._add(reading)
        for watcher in self.watchers:
            self._poll(watcher, ts)
        for watcher in self.event_watchers:
            observe = getattr(watcher, "observe", None)
            if observe is not None:
                try:
                    observe(readings)
                except Exception as exc:  # noqa: BLE001 (as below)
                    log.error("event watcher failed at %.0f: %s: %s", ts, type(exc).__name__, exc)
            self._poll(watcher, ts, events=True)

    def _poll(self, watcher: JobWatcher, ts: float, *, events: bool = False) -> None:
        try:
            batches = watcher.poll(ts)
        except Exception as exc:  # noqa: BLE001 (a watcher's bug must not stop GPU sampling)
            log.error("job watcher failed at %.0f: %s: %s", ts, type(exc).__name__, exc)
            return
        for batch_id, text in batches:
            if events:
                self.event_sink(batch_id, text)
                self.event_batches += 1
            else:
                self.job_sink(batch_id, text)
                self.job_batches += 1
        # Only now is what the watcher reported safe (published or spooled): remember it.
        watcher.commit()

    def _add(self, r: NodeReading) -> None:
        key = (r.cluster, r.node)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(r.gpus, gpu_info_dicts(r.gpus))
        elif pending.gpus != r.gpus:
            # GPU list changed (dcgm-exporter restarted, new board): the batch lists the
            # newest set plus any GPU an earlier row of this batch refers to.
            known = {g.index: g for g in pending.gpus}
            known.update({g.index: g for g in r.gpus})
            pending.gpus = [known[i] for i in sorted(known)]
            pending.gpu_dicts = gpu_info_dicts(pending.gpus)
        pending.samples.extend(r.gpu_rows)
        if r.node_row is not None:
            pending.node_samples.append(r.node_row)
        pending.rounds += 1
        if pending.rounds >= self.intervals_per_batch:
            self._emit(key, pending)

    def _emit_pending(self) -> None:
        for key, pending in list(self._pending.items()):
            if pending.rounds:
                self._emit(key, pending)

    def _emit(self, key: tuple[str, str], pending: _Pending) -> None:
        cluster, node = key
        batch_id, text = batch_json(
            cluster=cluster,
            node=node,
            token=self.tokens(cluster, node),
            source=self.backend.source,
            gpus=pending.gpu_dicts,
            # GPU-major (index, ts), the order of the server's primary key: its sort is then
            # a single pass and its COPY touches each GPU's index pages once.
            samples=sorted(pending.samples, key=_index_ts),
            node_samples=pending.node_samples,
        )
        self._pending[key] = _Pending(pending.gpus, pending.gpu_dicts)
        self.sink(batch_id, text)
        self.batches += 1

    def flush(self) -> None:
        """Send every partly filled batch (at the end of a run), and watchers' last words."""
        self._emit_pending()
        for watcher in self.watchers:
            finish = getattr(watcher, "finish", None)  # the simulator ends its jobs in flight
            if finish is not None:
                for batch_id, text in finish():
                    self.job_sink(batch_id, text)
                    self.job_batches += 1
        for watcher in self.event_watchers:
            finish = getattr(watcher, "finish", None)  # windows still open are sent as they are
            if finish is not None:
                for batch_id, text in finish():
                    self.event_sink(batch_id, text)
                    self.event_batches += 1
                watcher.commit()
