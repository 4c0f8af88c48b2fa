"""The simulated fleet's jobs as the collector sees them: every cluster's ClusterJobs
(collectors/backends/simjobs.py) advanced together in step with the telemetry rounds, the
scheduler commands Vigil sends through the inbox (collectors/backends/siminbox.py), the demo's
first live incident, and the two sources the collector polls: the job events' batches
(`SimulatedJobWatcher`) and the injected failures' node events (`SimulatedFailureSource`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

from collectors.backends.siminbox import SchedulerInbox
from collectors.backends.simjobs import ClusterJobs
from collectors.backends.simphases import paper_twin
from collectors.backends.simworkload import SimJob
from collectors.schema import SCHEMA_VERSION, GpuInfo, JobEventBatch, new_batch_id
from collectors.watchers.nodeevents import NodeEvents

log = logging.getLogger("vigil.collector")

# The first incident's cause (JobSimulator's first_fault_at): an NVLink error (Xid 74), the most
# frequent infrastructure failure in Acme's table (Hu et al., NSDI '24, Table 3: 54 of them;
# docs/failure-taxonomy.md "Reference counts").
FIRST_FAULT_CAUSE = "gpu_nvlink"


class JobSimulator:
    """The jobs of every simulated cluster, advanced in step with the telemetry rounds."""

    def __init__(
        self,
        layout: dict[str, list[str]],
        gpus_per_node: int,
        *,
        seed: int | None = None,
        failures: bool = True,
        inventory: dict[str, list[GpuInfo]] | None = None,
        inbox: Path | None = None,
        first_fault_at: float | None = None,
    ) -> None:
        self.inbox = SchedulerInbox(inbox) if inbox is not None else None
        # When the first incident is due (epoch seconds; None: only the workload's own
        # failures): see `advance`.
        self.first_fault_at = first_fault_at
        self.commands: list[tuple[str, float, list[list[str]]]] = []
        rng = random.Random(None if seed is None else seed + 1_000_003)
        self.clusters = {
            c: ClusterJobs(
                c,
                nodes,
                gpus_per_node,
                random.Random(rng.random()),
                # A generator of its own (seeded by name): the job stream does not change.
                fail_rng=random.Random(
                    f"failures/{paper_twin(c)}/{seed}" if seed is not None else None
                )
                if failures
                else None,
                inventory=inventory,
            )
            for c, nodes in layout.items()
        }

    def advance(self, ts: float) -> None:
        if self.inbox is not None:
            # A command sent after this round's time (the round was stamped before the file
            # was written) waits for the next round: its effects never predate it.
            self.commands += self.inbox.take()
            due = [c for c in self.commands if c[1] <= ts]
            self.commands = [c for c in self.commands if c[1] > ts]
            for cluster, when, commands in due:
                self._commands(cluster, when, commands)
        for c in self.clusters.values():
            c.advance(ts)
        if self.first_fault_at is not None and ts >= self.first_fault_at:
            # The first incident: a GPU of the first cluster's pretraining run that is working
            # faults (at the next round that finds one). Acme's pretraining runs fail on
            # hardware every few hours to days, so an hour's demo would rarely see one live;
            # after this one, failures come at the workload's own rates.
            for c in self.clusters.values():
                if c.fault_now(ts, FIRST_FAULT_CAUSE) is not None:
                    self.first_fault_at = None
                    break

    def _commands(self, cluster: str, when: float, commands: list[list[str]]) -> None:
        c = self.clusters.get(cluster)
        if c is None or c.now is None:
            log.warning("simulated scheduler: commands for %r, which it does not run", cluster)
            return
        c.advance(when)
        for argv in commands:
            try:
                log.info("simulated scheduler of %s: %s", cluster, c.command(argv, when))
            except ValueError as exc:
                log.warning("simulated scheduler of %s: %s", cluster, exc)

    def finish(self, ts: float) -> None:
        for c in self.clusters.values():
            if c.now is not None:
                c.finish(ts)

    def gpu_busy(self, cluster: str, node: int, gpu: int, ts: float) -> bool:
        return self.clusters[cluster].gpu_busy(node, gpu, ts)

    def holder(self, cluster: str, node: int, gpu: int, ts: float) -> tuple[SimJob, int] | None:
        return self.clusters[cluster].holder(node, gpu, ts)

    def node_busy(self, cluster: str, node: int, ts: float) -> bool:
        c = self.clusters[cluster]
        return any(c.gpu_busy(node, g, ts) for g in range(c.gpn))

    def watcher(self, tokens: Callable[[str, str], str]) -> SimulatedJobWatcher:
        return SimulatedJobWatcher(self, tokens)

    def event_source(self) -> SimulatedFailureSource:
        for cluster in self.clusters.values():
            cluster.keep_traces = True
        return SimulatedFailureSource(self)


class SimulatedFailureSource:
    """The injected failures' GPU events and log windows, for NodeEventWatcher."""

    def __init__(self, sim: JobSimulator) -> None:
        self.sim = sim

    def poll(self, ts: float) -> list[NodeEvents]:
        self.sim.advance(ts)
        return [e for c in self.sim.clusters.values() for e in c.take_node_events()]

    def finish(self) -> list[NodeEvents]:
        return [e for c in self.sim.clusters.values() for e in c.take_node_events()]

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


class SimulatedJobWatcher:
    """Sends each cluster's new job events as one batch from the cluster's first node."""

    MAX_EVENTS = 10_000  # per batch; the warm-up history is split

    def __init__(self, sim: JobSimulator, tokens: Callable[[str, str], str]) -> None:
        self.sim = sim
        self.tokens = tokens
        self.last_ts: float | None = None

    def poll(self, ts: float) -> list[tuple[str, str]]:
        self.sim.advance(ts)
        self.last_ts = ts
        return self._batches()

    def finish(self) -> list[tuple[str, str]]:
        """End of the run: jobs in flight end cancelled at the last round."""
        if self.last_ts is None:
            return []
        self.sim.finish(self.last_ts)
        return self._batches()

    def _batches(self) -> list[tuple[str, str]]:
        out = []
        for name, cluster in self.sim.clusters.items():
            events = cluster.take_events()
            states = cluster.take_node_states()
            sender = cluster.nodes[0]
            for i in range(0, max(len(events), len(states) and 1), self.MAX_EVENTS):
                batch = JobEventBatch(
                    v=SCHEMA_VERSION,
                    batch_id=new_batch_id(),
                    cluster=name,
                    node=sender,
                    token=self.tokens(name, sender),
                    sent_at=time.time(),
                    source="simulated",
                    events=events[i : i + self.MAX_EVENTS],
                    node_states=states if i == 0 else [],
                )
                out.append((str(batch.batch_id), batch.model_dump_json(exclude_none=True)))
        return out

    def commit(self) -> None:
        pass
