"""Simulated jobs for the simulated fleet: Acme's workload mix, scaled to a small cluster.

Numbers from docs/acme-workload.md (Hu et al., NSDI '24, and AcmeTrace), sections 2-4:
evaluation jobs are most of the count and little of the GPU time, pretraining the opposite;
about 40% of jobs fail (mostly at once: script errors), long pretraining runs end cancelled or
failed far more often than completed; evaluation waits longest (low priority, submitted in
batches), and spends about 30% of its time loading the model and 19% computing metrics with
the GPU idle (section 6).

How it is scaled to 16 nodes x 8 GPUs: Acme reserves quota for pretraining; here a fixed share
of each cluster's nodes is a pretraining lane that always runs one pretraining job over all its
nodes (a new run is submitted a few minutes after the last one ended, as a team restarts from
its checkpoint). The other nodes take everything else, arriving as a Poisson stream whose rate
is set so that the pool is offered `pool_load` of its GPUs. Sizes and durations per type are
chosen so that each type's share of jobs and GPU time lands within a few points of Seren's (or
Kalos's) figures over a simulated week (tests/collectors/test_simjobs.py).
The workload model itself (types, mix, users, how GPUs work) is collectors/backends/simworkload.py.

The model is event-driven and deterministic for a seed. It tells the telemetry simulator which
GPUs are busy (`gpu_busy`): a free GPU idles, a held one works unless the job leaves it idle
(evaluation loading and metric phases, debug sessions, jobs that asked for more GPUs than they
use), which is how "wasted GPUs" show up. Job changes come out as JobEventIn objects, collected
per cluster and sent as one JobEventBatch per cluster from the cluster's first node.
The clusters together, the scheduler inbox, the first incident and the sources the collector
polls (JobSimulator and its watchers) are collectors/backends/simfleet.py.

Failed jobs carry a cause (collectors/backends/simfailures.py): a GPU fault is a GPU error
event on the culprit node at the fault time (NCCL's timeout before the job ends), and every
failure leaves error windows in the job's logs on its nodes at the end, sent through the same
node-event path as a real node's (`JobSimulator.event_source()`). Causes are drawn from a
generator of their own, so the job stream of a seed is the same with or without them.

A first incident can be named (`first_fault_at`, the demo's VIGIL_SIM_FIRST_FAULT_S): then a
GPU of the first working pretraining run faults (an NVLink Xid) at that time, so a demo sees a
live hardware failure within minutes rather than every few hours.

Vigil acts on the simulated clusters as on Slurm: `ClusterJobs.command` carries out the
commands its Slurm executor builds (`scontrol requeue <job>`, `scontrol update NodeName=..
State=DRAIN|RESUME`), handed over through a folder of JSON files (`scheduler_commands_send`;
the demo names the folder in VIGIL_SIM_SCHEDULER_DIR for its collector and its worker). A
requeued job reports `requeued`, goes back to the queue under its id and starts again when it
fits, as a new run of its type; a drained node takes no job; a pretraining run short of nodes
takes whole pool nodes, requeuing the pool's jobs on them (Slurm's QOS preemption with
PreemptMode=REQUEUE), and its requeue replaces the team's own resubmission.

Who agrees on the schedule: one `--source simulated` process speaks for every node of its
clusters, so all of a cluster's nodes read one JobSimulator. Another process agrees with it
only if it has the same --seed, clusters, nodes per cluster and first timestamp (the warm-up
and the job ids count from it). What a job's GPUs do over time (lockstep phases, checkpoint
stalls, a straggler) is drawn from (cluster, job id) and the time alone
(collectors/backends/simphases.py), so it needs no state shared between nodes.
"""

from __future__ import annotations

import heapq
import math
import random
import re

from collectors.backends import simfailures, simphases
from collectors.backends.simphases import paper_twin
from collectors.backends.simworkload import (
    CHECKPOINT_EVERY_S,
    CLUSTER_MIX,
    DEBUG_IDLE_SHARE,
    EVAL_BATCH,
    ITERATION_S,
    JOB_LOG_DIR,
    OVER_REQUEST_SHARE,
    POOL_TYPES,
    PRETRAIN,
    PRETRAIN_GAP_S,
    TEAMS,
    USERS,
    WARMUP_S,
    SimJob,
    TypeModel,
    lognormal,
    weighted,
)
from collectors.schema import (
    GpuErrorEventIn,
    GpuInfo,
    JobEventIn,
    JobGpus,
    LogWindowIn,
    NodeStateIn,
)
from collectors.watchers.joblogs import is_trigger, message_of
from collectors.watchers.nodeevents import NodeEvents

# How long an ended job may still be requeued: slurmctld keeps a finished job's record for
# MinJobAge (300 s by default, slurm.conf(5)); a site whose recovery requeues failed jobs keeps
# them longer (our assumption: two hours, well past the ten minutes within which Vigil acts on a
# failure, VIGIL_RECOVERY_ACT_WITHIN_S).
ENDED_KEPT_S = 7200.0


def job_project(name: str) -> str:
    """The project a simulated job is charged to: the model its name works on (`llm-7b` for
    `sft-7b-chat`), or the shared `platform` for tooling jobs (debug, data, conversions)."""
    m = re.search(r"-(\d+b)(?:-|$)", name)
    return f"llm-{m.group(1)}" if m else "platform"


class ClusterJobs:
    """One cluster's jobs: a pretraining lane, a pool, a queue, and the events they make."""

    def __init__(
        self,
        cluster: str,
        nodes: list[str],
        gpus_per_node: int,
        rng: random.Random,
        *,
        fail_rng: random.Random | None = None,
        inventory: dict[str, list[GpuInfo]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.fail_rng = fail_rng  # None: failed jobs leave no traces
        self.inventory = inventory or {}
        self.node_events: dict[str, NodeEvents] = {}
        # Traces are kept only once someone takes them (JobSimulator.event_source()), so a
        # simulator run without a node-event watcher (benchmarks) does not pile them up.
        self.keep_traces = False
        self.nodes = nodes
        self.gpn = gpus_per_node
        self.rng = rng
        conf = CLUSTER_MIX.get(paper_twin(cluster), CLUSTER_MIX["seren"])
        mix = conf["mix"]
        own = {t.name: t for t in conf.get("types", ())}
        self.types = [own.get(t.name, t) for t in POOL_TYPES if t.name in mix]
        self.pretrain = conf.get("pretrain", PRETRAIN)
        self.stall_s = conf["checkpoint_stall_s"]
        # An evaluation arrival is a batch of trials: weigh arrivals so that jobs match the mix.
        mean_batch = sum(EVAL_BATCH) / 2
        self.weights = [mix[t.name] / (mean_batch if t.name == "eval" else 1) for t in self.types]
        n_lane = int(len(nodes) * conf["reserve"]) if len(nodes) > 1 else 0
        self.lane_nodes = list(range(n_lane))
        self.pool_nodes = list(range(n_lane, len(nodes)))
        self.free: list[set[int]] = [set(range(gpus_per_node)) for _ in nodes]
        self.owner: dict[tuple[int, int], tuple[SimJob, int]] = {}
        self.queue: list[SimJob] = []
        self.events: list[JobEventIn] = []
        # (when, seq, kind, job, the job's attempt): a requeued job's old end and fault
        # events are dropped by their attempt.
        self.heap: list[tuple[float, int, str, SimJob | None, int]] = []
        self.drained: set[int] = set()  # node indices drained by a scheduler command
        # What the scheduler says of the nodes a command drained or resumed, as its watcher
        # reports them (`_node_state`): node -> (state, reason) last reported; NodeStateIn
        # objects to send with the next job-event batch.
        self.drain_reason: dict[int, str] = {}
        self.reported: dict[int, tuple[str, str]] = {}
        self.node_states: list[NodeStateIn] = []
        # Jobs by id that a command may still name: queued, running, or ended within
        # ENDED_KEPT_S (when they ended).
        self.known: dict[str, SimJob] = {}
        self.ended_at: dict[str, float] = {}
        self._seq = 0
        self._next_id = 1000
        pool_gpus = len(self.pool_nodes) * gpus_per_node
        # Arrival rate so that the pool is offered `pool_load` of its GPU time (Monte Carlo
        # estimate of the mean GPU-seconds per arrival, with a private generator).
        est = random.Random(1)
        mean = sum(self._gpu_seconds(self._draw(est, 0.0)) for _ in range(4000)) / 4000
        self.rate = conf["pool_load"] * pool_gpus / mean if pool_gpus else 0.0
        self.now: float | None = None
        self.quiet = False

    # Drawing jobs ------------------------------------------------------------------------

    def _gpu_seconds(self, jobs: list[SimJob]) -> float:
        return sum(j.gpus * j.duration_s for j in jobs)

    def _new_id(self) -> str:
        self._next_id += 1
        return str(self._next_id)

    def _final_state(self, rng: random.Random, t: TypeModel) -> str:
        r = rng.random()
        if r < t.completed:
            return "COMPLETED"
        return "CANCELLED" if r < t.completed + t.cancelled else "FAILED"

    def _draw(self, rng: random.Random, ts: float) -> list[SimJob]:
        """One arrival: a job, or a batch of evaluation trials."""
        t = rng.choices(self.types, weights=self.weights)[0]
        count = rng.randint(*EVAL_BATCH) if t.name == "eval" else 1
        out = []
        model = f"{rng.choice((7, 7, 20, 70))}b"
        pool_gpus = max(len(self.pool_nodes) * self.gpn, 1)
        for k in range(count):
            gpus = min(weighted(rng, t.sizes), pool_gpus)
            if gpus > self.gpn:
                gpus -= gpus % self.gpn
            duration = lognormal(rng, t.median_s, t.sigma)
            state = self._final_state(rng, t)
            if state == "FAILED":
                # Script and framework errors strike within minutes (section 7).
                duration *= rng.uniform(0.02, 0.4)
            name = {
                "eval": f"eval-{model}-{rng.choice(('humaneval', 'mmlu', 'gsm8k', 'ceval'))}",
                "sft": f"sft-{model}-chat",
                "mllm": f"mllm-{model}-vision",
                "debug": "debug-interactive",
                "other": rng.choice(("data-tokenize", "convert-ckpt", "bench-nccl")),
            }[t.name]
            user = rng.choice(USERS[t.name])
            out.append(
                SimJob(
                    job_id="",
                    job_type=t.name,
                    name=name if t.name != "eval" else f"{name}-{k}",
                    user=user,
                    gpus=max(gpus, 1),
                    duration_s=max(duration, 5.0),
                    state=state,
                    submit_ts=ts,
                    priority=2 if t.name == "eval" else 1,
                    idle_all=t.name == "debug" and rng.random() < DEBUG_IDLE_SHARE,
                )
            )
            job = out[-1]
            over = t.name in ("sft", "other", "mllm") and rng.random() < OVER_REQUEST_SHARE
            if over and job.gpus > 1:
                job.idle_gpus = job.gpus // 2
        return out

    def _draw_pretrain(self, ts: float) -> SimJob:
        rng = self.rng
        duration = lognormal(rng, self.pretrain.median_s, self.pretrain.sigma)
        state = self._final_state(rng, self.pretrain)
        if state == "FAILED":
            duration *= rng.uniform(0.2, 1.0)  # infrastructure faults strike midway
        size = len(self.lane_nodes) * self.gpn
        return SimJob(
            job_id="",
            job_type="pretrain",
            name=f"pretrain-{rng.choice(('7b', '20b', '123b'))}-internevo",
            user=rng.choice(USERS["pretrain"]),
            gpus=size,
            duration_s=max(duration, 600.0),
            state=state,
            submit_ts=ts,
            priority=0,
            lane=True,
            stall_s=self.stall_s,
        )

    # Events ------------------------------------------------------------------------------

    def _push(self, ts: float, kind: str, job: SimJob | None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (ts, self._seq, kind, job, job.attempt if job else 0))

    def _emit(self, job: SimJob, kind: str, ts: float, **extra: object) -> None:
        if self.quiet:
            return
        self.events.append(
            JobEventIn(
                job_id=job.job_id,
                kind=kind,  # type: ignore[arg-type]
                ts=ts,
                name=job.name,
                user=job.user,
                team=TEAMS.get(job.user, job.job_type),
                project=job_project(job.name),
                partition="pretrain" if job.lane else "llm",
                qos="low" if job.job_type == "eval" else "normal",
                job_type=job.job_type,  # type: ignore[arg-type]
                submit_ts=job.submit_ts,
                gpus_requested=job.gpus,
                nodes_requested=max(1, math.ceil(job.gpus / self.gpn)),
                **extra,  # type: ignore[arg-type]
            )
        )

    def _submit(self, job: SimJob, ts: float) -> None:
        job.job_id = self._new_id()
        job.submit_ts = ts
        self.queue.append(job)
        self.known[job.job_id] = job
        self._emit(job, "submitted", ts)

    def start(self, t0: float) -> None:
        """Begin at t0, after a silent warm-up; report the jobs in flight as of t0."""
        begin = t0 - WARMUP_S
        self.now = begin
        # Job ids unique across runs of the simulator (a restart must not reuse them).
        self._next_id = int(t0) * 1000
        self.quiet = True
        if self.lane_nodes:
            self._submit(self._draw_pretrain(begin), begin)
        if self.rate:
            self._push(begin + self.rng.expovariate(self.rate), "arrive", None)
        self._schedule(begin)
        self.advance(t0)
        self.quiet = False
        running = {id(j): j for j, _pos in self.owner.values()}
        for job in sorted(running.values(), key=lambda j: int(j.job_id)):
            job.submit_ts = max(job.submit_ts, t0)
            job.start_ts = max(job.start_ts or t0, t0)
            self._emit(job, "submitted", job.submit_ts)
            self._emit(job, "started", job.start_ts, start_ts=job.start_ts, allocation=job.alloc)
        for job in self.queue:
            job.submit_ts = max(job.submit_ts, t0)
            self._emit(job, "submitted", job.submit_ts)

    def finish(self, ts: float) -> None:
        """The simulation stops at ts: every job in flight ends there, cancelled."""
        running = {id(j): j for j, _pos in self.owner.values()}
        for job in sorted(running.values(), key=lambda j: int(j.job_id)):
            job.state = "CANCELLED"
            self._end(job, max(ts, job.start_ts or ts), resubmit=False)
        for job in self.queue:
            self._emit(job, "ended", max(ts, job.submit_ts), state="CANCELLED", end_ts=ts)
        self.queue = []
        self.heap = []

    def advance(self, ts: float) -> None:
        if self.now is None:
            self.start(ts)
            return
        while self.heap and self.heap[0][0] <= ts:
            when, _, kind, job, attempt = heapq.heappop(self.heap)
            if job is not None and attempt != job.attempt:
                continue  # an event of a run that was requeued since
            if kind == "arrive":
                for j in self._draw(self.rng, when):
                    self._submit(j, when)
                self._push(when + self.rng.expovariate(self.rate), "arrive", None)
            elif kind == "end" and job is not None:
                self._end(job, when)
            elif kind == "resubmit":
                self._submit(self._draw_pretrain(when), when)
            elif kind == "fault" and job is not None:
                self._fault(job, when)
                continue  # frees nothing: no scheduling pass
            self._schedule(when)
        self.now = max(self.now or ts, ts)
        for job_id, ended in list(self.ended_at.items()):
            if ended < ts - ENDED_KEPT_S:
                del self.ended_at[job_id]
                self.known.pop(job_id, None)

    # Scheduler commands --------------------------------------------------------------------

    def command(self, argv: list[str], ts: float) -> str:
        """Carry out one scheduler command as the Slurm executor writes it, at `ts` (at the
        earliest this cluster's present); what slurmctld would answer. Understood: `scontrol
        requeue <job>`, `scontrol update NodeName=<n> State=DRAIN|RESUME ...`; the rest
        (`update JobId=.. StartTime=now`, reservations, health-check jobs) changes nothing
        here. Raises ValueError for a command it cannot carry out, naming why."""
        ts = max(ts, self.now or ts)
        args = list(argv[1:]) if argv and argv[0].rsplit("/", 1)[-1] == "scontrol" else []
        args = [a for a in args if a != "--"]  # the executor puts names after `--`
        fields = dict(a.split("=", 1) for a in args[1:] if "=" in a)
        if args[:1] == ["requeue"] and len(args) == 2:
            return self._requeue_command(args[1], ts)
        if args[:1] == ["update"] and "NodeName" in fields and "State" in fields:
            if fields["NodeName"] not in self.nodes:
                raise ValueError(f"node {fields['NodeName']!r} is not in cluster {self.cluster}")
            n = self.nodes.index(fields["NodeName"])
            state = fields["State"].upper()
            if state == "DRAIN":
                self.drained.add(n)
                self.drain_reason[n] = fields.get("Reason", "")
                self._node_state(n, ts)
            elif state == "RESUME":
                self.drained.discard(n)
                self.drain_reason.pop(n, None)
                self._node_state(n, ts)
                self._schedule(ts)
            else:
                raise ValueError(f"node state {fields['State']!r} is not simulated")
            return f"node {fields['NodeName']} {state.lower()}"
        known = (["update"], ["create"], ["delete"])
        if args[:1] in known or (argv and argv[0].rsplit("/", 1)[-1] == "sbatch"):
            return "nothing to simulate"
        raise ValueError(f"command {' '.join(argv)!r} is not simulated")

    def _requeue_command(self, job_id: str, ts: float) -> str:
        job = self.known.get(job_id)
        if job is None:
            raise ValueError(f"job {job_id} is not known to cluster {self.cluster}")
        if job in self.queue:
            raise ValueError(f"job {job_id} is pending already")
        if job.lane:
            # The team would have resubmitted a new run by hand: the requeued one replaces it.
            self.heap = [h for h in self.heap if h[2] != "resubmit"]
            heapq.heapify(self.heap)
        self._requeue(job, ts)
        self._schedule(ts)
        return f"job {job_id} requeued"

    def _requeue(self, job: SimJob, ts: float) -> None:
        """The job goes back to the queue under its id, its GPUs freed if it ran; its next run
        is drawn as a new one of its type (a restart from its last checkpoint), from a
        generator of its own, so the rest of the job stream does not change."""
        self._release(job, ts)
        self.ended_at.pop(job.job_id, None)
        job.attempt += 1
        # Slurm resets a requeued job's submit time (sacct's and scontrol's man pages).
        job.submit_ts = ts
        self._emit(job, "requeued", ts)
        rng = random.Random(f"requeue/{paper_twin(self.cluster)}/{job.job_id}/{job.attempt}")
        model = self.pretrain if job.lane else next(t for t in self.types if t.name == job.job_type)
        job.state = self._final_state(rng, model)
        duration = lognormal(rng, model.median_s, model.sigma)
        if job.state == "FAILED":  # as _draw and _draw_pretrain shorten a failing run
            duration *= rng.uniform(0.2, 1.0) if job.lane else rng.uniform(0.02, 0.4)
        job.duration_s = max(duration, 600.0 if job.lane else 5.0)
        job.held, job.alloc, job.straggler, job.cause, job.culprit = [], [], None, None, 0
        job.start_ts = job.began_ts = job.end_ts = None
        self.queue.append(job)

    def _fit(self, job: SimJob) -> list[tuple[int, int]] | None:
        if job.lane:
            # Pretraining's reserved nodes, and for each drained one a whole pool node (a site
            # keeps pretraining's quota whole).
            nodes = [n for n in self.lane_nodes if n not in self.drained]
            if any(len(self.free[n]) < self.gpn for n in nodes):
                return None  # another run holds them
            short = len(self.lane_nodes) - len(nodes)
            nodes += [
                n for n in self.pool_nodes
                if n not in self.drained and len(self.free[n]) == self.gpn
            ][:short]  # fmt: skip
        else:
            nodes = [n for n in self.pool_nodes if n not in self.drained]
        if job.gpus <= self.gpn:
            # Best fit: the node with the fewest free GPUs that still fits the job.
            fits = [n for n in nodes if len(self.free[n]) >= job.gpus]
            if not fits:
                return None
            n = min(fits, key=lambda n: (len(self.free[n]), n))
            return [(n, g) for g in sorted(self.free[n])[: job.gpus]]
        whole = [n for n in nodes if len(self.free[n]) == self.gpn]
        need = math.ceil(job.gpus / self.gpn)
        if len(whole) < need:
            return None
        return [(n, g) for n in whole[:need] for g in range(self.gpn)]

    def _schedule(self, ts: float) -> None:
        self.queue.sort(key=lambda j: (j.priority, j.submit_ts, int(j.job_id)))
        for job in list(self.queue):
            held = self._fit(job)
            if held is None and job.lane:
                held = self._preempt_for(job, ts)
            if held is None:
                continue
            self.queue.remove(job)
            # The scheduler's cycle: a job starts a few seconds after it could (Slurm's
            # sched_min_interval; Kalos "almost no job starts within about 8 s").
            start = ts + self.rng.uniform(1.0, 8.0 if paper_twin(self.cluster) == "kalos" else 3.0)
            job.held = held
            job.start_ts = job.began_ts = start
            job.end_ts = start + job.duration_s
            job.phase_key = simphases.job_key(self.cluster, job.job_id)
            if len({n for n, _g in held}) > 1:
                job.straggler = simphases.straggler_plan(
                    job.phase_key, len(held), start, job.duration_s
                )
            for pos, (n, g) in enumerate(held):
                self.free[n].discard(g)
                self.owner[(n, g)] = (job, pos)
            by_node: dict[int, list[int]] = {}
            for n, g in held:
                by_node.setdefault(n, []).append(g)
            job.alloc = [JobGpus(node=self.nodes[n], gpu_indices=gs) for n, gs in by_node.items()]
            self._emit(job, "started", start, start_ts=start, allocation=job.alloc)
            self._push(job.end_ts, "end", job)
            if job.state == "FAILED" and self.fail_rng is not None:
                self._plan_failure(job)

    def _preempt_for(self, job: SimJob, ts: float) -> list[tuple[int, int]] | None:
        """A pretraining run short of nodes (some drained) takes pool nodes, requeuing the
        pool's jobs on them, as Slurm's QOS preemption with PreemptMode=REQUEUE does for a
        higher-priority QOS; the emptiest pool nodes first."""
        need = math.ceil(job.gpus / self.gpn)
        lane = [n for n in self.lane_nodes if n not in self.drained]
        if any(len(self.free[n]) < self.gpn for n in lane):
            return None  # another run holds its own nodes: it waits for them
        pool = sorted(
            (n for n in self.pool_nodes if n not in self.drained),
            key=lambda n: (-len(self.free[n]), n),
        )
        if len(lane) + len(pool) < need:
            return None
        for n in pool[: need - len(lane)]:
            for g in range(self.gpn):
                held = self.owner.get((n, g))
                if held is not None:
                    self._requeue(held[0], ts)
        return self._fit(job)

    # Failures ----------------------------------------------------------------------------

    def _plan_failure(self, job: SimJob) -> None:
        rng = self.fail_rng
        assert rng is not None and job.start_ts is not None and job.end_ts is not None
        job.cause = simfailures.draw_cause(rng, job.lane)
        hardware = job.cause in simfailures.HARDWARE_XID
        # Script errors are raised by every rank alike: rank 0's copy is the one users read.
        job.culprit = rng.randrange(len(job.held)) if hardware or job.lane else 0
        if hardware:
            # The GPU faults; the job dies when NCCL's watchdog gives up on the collective.
            lead = simfailures.NCCL_TIMEOUT_S + rng.uniform(5.0, 60.0)
            self._push(max(job.start_ts + 1.0, job.end_ts - lead), "fault", job)

    def fault_now(self, ts: float, cause: str) -> SimJob | None:
        """A GPU of the pretraining run working at `ts` faults now with `cause` (a hardware
        cause): its Xid is reported at `ts` and the run dies when NCCL's watchdog gives up, as
        an injected hardware failure does, unless the scheduler requeues it first. The run's
        own end and fault, whatever they were, are dropped. None, changing nothing, when no
        run is working (between runs, still waiting) or no one takes the traces."""
        assert cause in simfailures.HARDWARE_XID, cause
        if not self._tracing():
            return None
        run = next(
            (j for j, _r in self.owner.values() if j.lane and (j.began_ts or ts + 1) <= ts),
            None,
        )
        if run is None:
            return None
        assert self.fail_rng is not None
        self.heap = [h for h in self.heap if h[3] is not run]
        heapq.heapify(self.heap)
        run.state, run.cause = "FAILED", cause
        run.culprit = self.fail_rng.randrange(len(run.held))
        run.end_ts = ts + simfailures.NCCL_TIMEOUT_S + self.fail_rng.uniform(5.0, 60.0)
        self._push(run.end_ts, "end", run)
        self._fault(run, ts)
        return run

    def _tracing(self) -> bool:
        return self.keep_traces and not self.quiet and self.fail_rng is not None

    def _node_events(self, node: str) -> NodeEvents:
        return self.node_events.setdefault(node, NodeEvents(self.cluster, node))

    def _fault(self, job: SimJob, ts: float) -> None:
        if not self._tracing() or job.cause not in simfailures.HARDWARE_XID:
            return
        assert self.fail_rng is not None
        xid = simfailures.HARDWARE_XID[job.cause]
        n, g = job.held[job.culprit]
        node = self.nodes[n]
        infos = self.inventory.get(node, [])
        info = infos[g] if g < len(infos) else None
        pci = info.pci_bus_id if info and info.pci_bus_id else f"00000000:{g:02X}:00.0"
        pid = self.fail_rng.randint(20000, 60000)
        ident = {"gpu_index": g, "gpu_uuid": info.uuid if info else None, "pci_bus_id": pci}
        events = self._node_events(node).gpu_events
        events.append(
            GpuErrorEventIn(
                ts=ts,
                kind="xid",
                source="simulated",
                xid=xid,
                pid=pid,
                message=simfailures.xid_message(xid, pid),
                **ident,  # type: ignore[arg-type]
            )
        )
        if xid == 48:  # a double-bit error also moves the volatile DBE counter
            events.append(
                GpuErrorEventIn(
                    ts=ts,
                    kind="ecc_dbe",
                    source="simulated",
                    delta=1,
                    message="ecc_dbe_vol +1",
                    **ident,  # type: ignore[arg-type]
                )
            )

    def _failure_windows(self, job: SimJob, ts: float) -> None:
        if not self._tracing() or job.cause is None or job.start_ts is None:
            return
        assert self.fail_rng is not None
        ctx = simfailures.FailureContext(
            job_id=job.job_id,
            host_of_rank=[self.nodes[n] for n, _ in job.held],
            culprit_rank=job.culprit,
            step=max(int((ts - (job.began_ts or job.start_ts)) / ITERATION_S), 3),
            rng=self.fail_rng,
        )
        shown = max(ts - 2.0, job.start_ts)
        for node, lines in simfailures.render_windows(job.cause, ctx, job.user).items():
            first = next((ln for ln in lines if is_trigger(ln)), None)
            if first is None:
                continue
            self._node_events(node).log_windows.append(
                LogWindowIn(
                    job_id=job.job_id,
                    ts=shown,
                    path=f"{JOB_LOG_DIR}/{job.job_id}/{node}.log",
                    first_line_no=ctx.step * 2 + 40,
                    lines=lines,
                    trigger=message_of(first).strip()[:256],
                )
            )

    def take_node_events(self) -> list[NodeEvents]:
        events, self.node_events = list(self.node_events.values()), {}
        return events

    def _release(self, job: SimJob, ts: float) -> None:
        for n, g in job.held:
            if self.owner.get((n, g), (None,))[0] is job:
                self.free[n].add(g)
                self.owner.pop((n, g), None)
        for n in {n for n, _g in job.held} & self.drained:
            self._node_state(n, ts)

    def _node_state(self, n: int, ts: float) -> None:
        """Report node n's state if it changed, as Slurm's watcher would: a drained node is
        draining while a job still holds GPUs on it and drained once none does (sinfo's DRNG
        and DRAIN, https://slurm.schedmd.com/sinfo.html#SECTION_NODE-STATE-CODES); a resumed
        one is up. Only nodes a command drained or resumed are reported."""
        if n in self.drained:
            busy = len(self.free[n]) < self.gpn
            now = ("draining" if busy else "drained", self.drain_reason.get(n, ""))
        elif n in self.reported:
            now = ("up", "")
        else:
            return
        if self.reported.get(n) == now:
            return
        if now[0] == "up":
            del self.reported[n]  # back in service: not reported again until drained
        else:
            self.reported[n] = now
        if not self.quiet:
            self.node_states.append(
                NodeStateIn(node=self.nodes[n], state=now[0], reason=now[1][:256], since=ts)
            )

    def _end(self, job: SimJob, ts: float, *, resubmit: bool = True) -> None:
        self._release(job, ts)
        self.ended_at[job.job_id] = ts
        exit_code = {"COMPLETED": 0, "FAILED": 1, "CANCELLED": -15}[job.state]
        if job.state == "FAILED" and job.cause is not None:
            exit_code = simfailures.EXIT_CODE[job.cause]
            self._failure_windows(job, ts)
        extra: dict[str, object] = {}
        began = job.began_ts
        if job.lane and began is not None and ts - began >= CHECKPOINT_EVERY_S:
            # The checkpoints follow the real start; one from before the first round of the
            # simulator (a job already running then) is not reported.
            last = began + (ts - began) // CHECKPOINT_EVERY_S * CHECKPOINT_EVERY_S
            if job.start_ts is None or last >= job.start_ts:
                extra["last_checkpoint_ts"] = last
        self._emit(
            job,
            "ended",
            ts,
            start_ts=job.start_ts,
            end_ts=ts,
            state=job.state,
            exit_code=exit_code,
            **extra,
        )
        if job.lane and resubmit and not any(j.lane for j in self.queue):
            self._push(ts + self.rng.uniform(*PRETRAIN_GAP_S), "resubmit", None)

    def gpu_busy(self, node: int, gpu: int, ts: float) -> bool:
        held = self.holder(node, gpu, ts)
        return held is not None and held[0].busy(held[1], ts)

    def holder(self, node: int, gpu: int, ts: float) -> tuple[SimJob, int] | None:
        """(job, rank) of the job running on the GPU at `ts`, or None."""
        held = self.owner.get((node, gpu))
        if held is None or held[0].began_ts is None or held[0].began_ts > ts:
            return None
        return held

    def take_events(self) -> list[JobEventIn]:
        events, self.events = self.events, []
        return events

    def take_node_states(self) -> list[NodeStateIn]:
        """The node states reported since the last call, the latest of each node."""
        latest = {s.node: s for s in self.node_states}
        self.node_states = []
        return list(latest.values())
