"""Recovery policy: a diagnosis in, the actions to take out. Plain data, no Django.

Follows docs/failure-taxonomy.md: each cause's default action, then the circuit breaker
(the same cause on the same node twice within 24 h turns a restart into a cordon; on other
nodes it points to software and turns into a notification), then the restart limit (a job
is never restarted automatically more than `max_restarts` times in a row). Script errors
(the user's own code, the host running out of memory) are never restarted: restarting cannot
fix them, so the owner is told instead. CUDA faults and native crashes restart once, then
notify ("restart (once), then notify").

Only hardware evidence makes Vigil act on a node by itself. A host blamed from the job's own
log (text the user's code can print) must be one of the job's nodes, or the node is located
by a health check of the job's nodes instead; a drain on such evidence alone waits for an
operator's approval. Node-agent evidence (kernel log, NVML, the scheduler's own report) and a
failed health check drain at once; the breaker counts only failures blamed on node-agent
evidence (planning.py gives it only those).

`decide(facts)` returns a `Decision`: the action chosen, the id of the rule that chose it, a
sentence of why, and the steps to run in order. The services turn steps into audited rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from webapp.failures.taxonomy import CAUSES, Action, Category

# docs/failure-taxonomy.md: "the same cause on the same node twice within 24 h".
BREAKER_WINDOW_H = 24
RESTARTING = frozenset({Action.RESTART, Action.RETRY})
AUTO_RESTART_ACTIONS = frozenset(
    {
        Action.RESTART,
        Action.RETRY,
        Action.CORDON_RESTART,
        Action.LOCATE_RESTART,
        Action.ROLLBACK_SKIP,
        Action.RESET_GPU,
        Action.REBOOT,
    }
)
# Actions that take the node out of service and restart its jobs elsewhere. A GPU reset or a
# reboot (NVIDIA's Xid catalog, docs/xid-catalog.md) starts with that drain, then Vigil resets
# the GPU (health check, resume) or has the scheduler reboot the node (`_after_drain`).
DRAINING = frozenset({Action.CORDON_RESTART, Action.RESET_GPU, Action.REBOOT})
# The prefix of every drain reason Vigil writes (executors/slurm.py drain_reason): a node
# drained with any other reason was drained by a person, and Vigil never resumes it.
VIGIL_REASON_PREFIX = "vigil"
# In the reason of a drain for NVIDIA's CONTACT_SUPPORT, CHECK_MECHANICALS or UPDATE_SWFW
# (docs/xid-catalog.md): the node waits for a person, and Vigil never returns it to service.
ESCALATED_MARK = "escalated to operators"
# Guard rails per cluster (RecoveryPolicy): past either, a drain waits for an operator.
MAX_DRAINS_PER_HOUR = 3
MAX_OUT_SHARE = 0.10
# "restart (once), then notify" (docs/failure-taxonomy.md, cuda_fault and native_crash).
RESTART_ONCE_CAUSES = frozenset({"cuda_fault", "native_crash"})
# Exponential backoff of `retry` (transient auxiliary services): 30 s, 60 s, 120 s, ... capped
# at 10 min, the shape of Celery's own retry_backoff.
RETRY_BASE_S = 30
RETRY_MAX_S = 600


@dataclass(frozen=True)
class JobFacts:
    scheduler_id: str
    user: str = ""
    hosts: tuple[str, ...] = ()
    # Automatic restarts of this job in a row before this failure, and those for this cause.
    restarts_in_a_row: int = 0
    restarts_for_cause: int = 0
    # Loss spike data for rollback_skip (from the diagnosis evidence), when known.
    spike_step: int | None = None
    checkpoint_step: int | None = None


@dataclass(frozen=True)
class Facts:
    cause: str
    action: str  # the diagnosis's default action
    category: str = ""
    blamed_host: str | None = None
    # Whether the failure was blamed on node-agent evidence (kernel log, NVML, counters, the
    # scheduler's report) rather than on the job's own log, which its user writes.
    node_evidence: bool = False
    # The node a GPU error happened on (a gpu_error failure has no job).
    error_host: str | None = None
    job: JobFacts | None = None
    # Jobs that held GPUs on error_host when a GPU error happened (gpu_error failures).
    jobs_on_host: tuple[JobFacts, ...] = ()
    # Blamed hosts of the earlier failures with this cause within 24 h.
    same_cause_hosts: tuple[str | None, ...] = ()
    max_restarts: int = 3
    # Hosts already drained (or being drained) and jobs already requeued for this run:
    # a second failure of the same incident (the GPU error and the job it killed) adds nothing.
    hosts_drained: frozenset[str] = frozenset()
    jobs_requeued: frozenset[str] = frozenset()
    retry_base_s: float = RETRY_BASE_S
    # Hosts drained by a person (their reason is not Vigil's): Vigil neither resets nor
    # reboots them, and never resumes them.
    hosts_held: frozenset[str] = frozenset()
    # Hosts Vigil drained for an escalation (ESCALATED_MARK in the scheduler's reason): like a
    # person's drain, never reset, rebooted or resumed by Vigil.
    hosts_escalated: frozenset[str] = frozenset()
    # The catalog's words for the Xid behind the failure (mnemonic, description, resolution),
    # when an Xid is behind it: an escalation with them drains the node.
    catalog_words: str = ""
    # The failing GPU's PCI bus id (what `nvidia-smi -r -i` takes), when known.
    gpu_bus_id: str = ""
    # Whether a node health check is configured (VIGIL_HEALTHCHECK_SCRIPT): without one a
    # reset node stays drained for an operator.
    health_check: bool = True
    # The action kinds the cluster's executor cannot carry out (Kubernetes: reset_gpu,
    # reboot): the drained node is left to operators, who are told.
    unsupported: frozenset[str] = frozenset()
    # The cluster's guard rails and where it stands: drains Vigil made in the last hour, nodes
    # out of service now, nodes in all.
    max_drains_per_hour: int = MAX_DRAINS_PER_HOUR
    max_out_share: float = MAX_OUT_SHARE
    drains_last_hour: int = 0
    nodes_out: int = 0
    nodes_total: int = 0
    # Seconds between the failure and its detection when that is more than `act_within_s`
    # (replayed from a spool or a history, or reported late), else None: see `late_apply`.
    detected_late_s: float | None = None
    act_within_s: float = 600.0


@dataclass(frozen=True)
class Step:
    kind: str  # ActionKind value
    host: str = ""
    job: str = ""  # scheduler id
    audience: str = ""
    params: dict = field(default_factory=dict)
    reason: str = ""
    # Planned as a proposal: it waits for an operator even in auto mode.
    needs_approval: bool = False


@dataclass(frozen=True)
class Decision:
    action: str
    rule: str
    reason: str
    steps: tuple[Step, ...] = ()


def breaker_apply(
    action: str,
    node: str | None,
    same_cause_nodes: Sequence[str | None],
    restarts_in_a_row: int = 0,
    max_restarts: int = 3,
) -> tuple[str, str, str]:
    """The circuit breaker of docs/failure-taxonomy.md over plain data: (action, rule, why).

    `same_cause_nodes`: blamed nodes of the earlier failures with this cause within 24 h.
    """
    if action in RESTARTING and node and node in same_cause_nodes:
        return (
            Action.CORDON_RESTART.value,
            "breaker_same_node",
            f"same cause on {node} twice within {BREAKER_WINDOW_H} h: cordon the node",
        )
    others = sorted({n for n in same_cause_nodes if n and n != node})
    if action in RESTARTING and others:
        return (
            Action.NOTIFY.value,
            "breaker_other_nodes",
            f"same cause on other nodes within {BREAKER_WINDOW_H} h ("
            + ", ".join(others[:5])
            + "): points to software, no automatic restart",
        )
    if action in AUTO_RESTART_ACTIONS and restarts_in_a_row >= max_restarts:
        return Action.NOTIFY.value, "restart_limit", _limited(restarts_in_a_row, max_restarts)
    return action, "", ""


def _limited(restarts: int, max_restarts: int) -> str:
    return f"already restarted automatically {restarts} times in a row (limit {max_restarts})"


def _category(facts: Facts) -> str:
    if facts.category:
        return facts.category
    cause = CAUSES.get(facts.cause)
    return cause.category.value if cause else Category.UNKNOWN.value


def decide(facts: Facts) -> Decision:
    """The action for one diagnosed failure, and the steps that carry it out."""
    return late_apply(facts, _decide(facts))


def late_apply(facts: Facts, decision: Decision) -> Decision:
    """A failure detected long after it happened (`facts.detected_late_s`: a collector's spool
    replayed after an outage, a history backfill, a late report) is told, not acted on: the
    scheduler has moved on since (the job ended, was requeued or resubmitted by its owner; the
    node was drained, repaired or returned by a person), so a drain, reset or requeue made
    from the old record may hit the wrong run or a node back in service. Whoever the plan
    would have touched is told what it would have done and why it did not."""
    if facts.detected_late_s is None:
        return decision
    acting = [s for s in decision.steps if s.kind != "notify"]
    if not acting:
        return decision
    would = ", ".join(
        f"{s.kind.replace('_', ' ')} {s.host or (f'job {s.job}' if s.job else '')}".strip()
        for s in acting
    )
    why = (
        f"detected {_minutes(facts.detected_late_s)} after it happened (replayed or reported "
        f"late; Vigil acts only on failures detected within {_minutes(facts.act_within_s)}): "
        f"would have run {would}; told instead, a person decides"
    )
    hardware = any(s.host or s.kind in ("health_check", "reset_gpu") for s in acting)
    audience = "operators" if hardware or facts.job is None else "owner"
    job = facts.job.scheduler_id if facts.job else ""
    step = Step("notify", job=job, audience=audience, reason=why[:512])
    # The why first: a plan's reason is kept to 512 characters.
    return Decision(Action.NOTIFY.value, "detected_late", f"{why}; {decision.reason}", (step,))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _decide(facts: Facts) -> Decision:
    action = facts.action or Action.NOTIFY.value
    if _category(facts) == Category.SCRIPT:
        # Restarting cannot fix the user's own code or a host that ran out of memory.
        return _notify(facts, "script_error", f"{facts.cause} is the job's own error: no restart")
    host = facts.blamed_host or facts.error_host
    job = facts.job
    outsider = None
    if host and not facts.node_evidence and (job is None or host not in job.hosts):
        # A job's log may print any host's name: only the job's own nodes can be blamed
        # from it (then located by a health check, below).
        outsider, host = host, None
    restarts = job.restarts_in_a_row if job else 0
    # The breaker first, without the limit: a node that failed twice is drained even when
    # the job may not be restarted again.
    action, rule, why = breaker_apply(action, host, facts.same_cause_hosts)
    if action in AUTO_RESTART_ACTIONS and job and restarts >= facts.max_restarts:
        why = _limited(restarts, facts.max_restarts)
        notify = _notify(facts, "restart_limit", why)
        drains = tuple(_drain(facts, host, action)) if action in DRAINING else ()
        limited = Decision(Action.NOTIFY.value, "restart_limit", why, drains + notify.steps)
        return guard_apply(facts, limited)
    once = facts.cause in RESTART_ONCE_CAUSES
    if action == Action.RESTART and job and once and job.restarts_for_cause >= 1:
        action, rule = Action.NOTIFY.value, "restart_once"
        why = f"{facts.cause} again after one restart: the owner decides"
    rule = rule or f"default_{action}"
    why = why or f"{facts.cause}: {action.replace('_', ' ')} (failure-taxonomy.md)"
    if action == Action.NONE:
        return Decision(action, rule, why)
    # An Xid NVIDIA says to take to support, check mechanically or update: drained, its jobs
    # restarted elsewhere, operators paged in the catalog's words; a person returns the node.
    escalate_node = action == Action.ESCALATE and bool(facts.catalog_words and host)
    if action in (Action.NOTIFY, Action.ESCALATE) and not escalate_node:
        return _notify(facts, rule, why, escalate=action == Action.ESCALATE, action=action)
    jobs = _jobs(facts)
    if action in DRAINING and not host:
        if job and job.hosts and outsider:
            action, rule = Action.LOCATE_RESTART.value, "blamed_outside_job"
            why = (
                f"the job's log blames {outsider}, not one of its nodes: health-check the "
                "job's nodes first"
            )
        elif job and job.hosts:
            action, rule = Action.LOCATE_RESTART.value, "cordon_without_node"
            why = f"{facts.cause} names no node: health-check the job's nodes first"
        else:
            return _notify(facts, "cordon_without_node", f"{facts.cause} names no node", True)
    steps: list[Step] = []
    after: list[Step] = []
    if action in DRAINING or escalate_node:
        drains = _drain(facts, host, action)
        steps += drains
        after = _after_drain(facts, host, action, drained_here=bool(drains))
    elif action == Action.LOCATE_RESTART:
        hosts = job.hosts if job else ()
        if not hosts:
            return _notify(facts, "locate_without_nodes", "no nodes known to health-check", True)
        steps.append(
            Step("health_check", params={"hosts": list(hosts)}, reason="find the failing node")
        )
    for j in jobs:
        if j.scheduler_id in facts.jobs_requeued:
            continue  # the same incident already requeued this run
        if escalate_node and j.restarts_in_a_row >= facts.max_restarts:
            continue  # the restart limit holds here too; operators are told of the node
        if action == Action.ROLLBACK_SKIP:
            steps.append(_rollback(j))
        else:
            params = {}
            if action == Action.RETRY:
                delay = facts.retry_base_s * 2**j.restarts_in_a_row
                params["delay_s"] = min(RETRY_MAX_S, delay)
            steps.append(Step("requeue", job=j.scheduler_id, params=params, reason=why))
    return guard_apply(facts, Decision(action, rule, why, tuple(steps + after)))


def _after_drain(facts: Facts, host: str | None, action: str, drained_here: bool) -> list[Step]:
    """What follows the drain of a GPU reset or a reboot, once the node's jobs have left.

    Reset: the GPU is reset by a job of Vigil's pinned to the node inside a maintenance
    reservation only Vigil may use (`reservation`: named after the plan, `{plan}`), then
    health-checked there, then the reservation ends and the node takes jobs again. Reboot:
    the scheduler reboots the node once idle and returns it to service itself.
    A node a person drained is left to them; a node this incident drained already (the GPU
    error's plan) is not reset twice."""
    if action not in (Action.RESET_GPU, Action.REBOOT, Action.ESCALATE) or not host:
        return []
    if action == Action.ESCALATE:
        if not drained_here:
            return []  # the same incident escalated the node already
        why = (
            f"{facts.cause} on {host}: {facts.catalog_words}; drained, never returned to "
            "service by Vigil: a person resumes it"
        )
        return [Step("notify", audience="operators", params={"severity": "page"}, reason=why)]
    what = "GPU reset" if action == Action.RESET_GPU else "reboot"
    if host in facts.hosts_escalated:
        why = (
            f"{facts.cause} on {host}: {what} needed, but {host} is {ESCALATED_MARK}: left to them"
        )
        return [Step("notify", audience="operators", params={"severity": "page"}, reason=why)]
    if host in facts.hosts_held:
        why = f"{facts.cause} on {host}: {what} needed, but a person drained {host}: left to them"
        return [Step("notify", audience="operators", params={"severity": "page"}, reason=why)]
    if not drained_here:
        return []
    if str(action) in facts.unsupported:
        why = f"{facts.cause} on {host}: {what} needed, which this cluster's executor cannot do"
        return [Step("notify", audience="operators", params={"severity": "page"}, reason=why)]
    if action == Action.REBOOT:
        return [Step("reboot", host=host, reason=f"{facts.cause} on {host}: reboot")]
    if not facts.gpu_bus_id:
        why = f"{facts.cause} on {host}: GPU reset needed, its PCI bus id is unknown: by hand"
        return [Step("notify", audience="operators", params={"severity": "page"}, reason=why)]
    reservation = f"vigil-reset-{{plan}}-{host}"
    reset = Step(
        "reset_gpu",
        host=host,
        params={"bus_id": facts.gpu_bus_id, "reservation": reservation},
        reason=f"{facts.cause} on {host}: reset GPU {facts.gpu_bus_id}",
    )
    held = {"reservation": reservation, "reserved": True}
    if not facts.health_check:
        why = f"GPU {facts.gpu_bus_id} reset; no health check configured: return it by hand"
        return [reset, Step("drain", host=host, params={**held, "reason": why}, reason=why)]
    check = Step(
        "health_check",
        params={**held, "hosts": [host], "drained_reason": f"{facts.cause}: GPU reset"},
        reason="after the GPU reset",
    )
    resume = Step("resume", host=host, params=held, reason="GPU reset and health check passed")
    return [reset, check, resume]


def nodes_out_max(nodes_total: int, share: float) -> int:
    """How many of a cluster's nodes may be out of service at once: the share, rounded down,
    but at least one (a small cluster can still drain its one bad node)."""
    return max(1, math.floor(share * nodes_total + 1e-9))


def guard_apply(facts: Facts, decision: Decision) -> Decision:
    """The cluster's guard rails: past `max_drains_per_hour` drains in the last hour, or with
    more than `max_out_share` of its nodes out of service once this one is, the drains wait
    for an operator's approval (the rest of the plan waits behind them) and operators are
    told why."""
    drains = [
        s
        for s in decision.steps
        if s.kind == "drain" and not s.needs_approval and not s.params.get("reserved")
    ]
    if not drains:
        return decision
    why = ""
    out_max = nodes_out_max(facts.nodes_total, facts.max_out_share)
    if facts.drains_last_hour + len(drains) > facts.max_drains_per_hour:
        why = (
            f"{facts.drains_last_hour} node(s) drained by Vigil in the last hour, at most "
            f"{facts.max_drains_per_hour} an hour: waits for approval"
        )
    elif facts.nodes_total and facts.nodes_out + len(drains) > out_max:
        why = (
            f"{facts.nodes_out} of {facts.nodes_total} nodes out of service already, at most "
            f"{out_max} ({facts.max_out_share:.0%}) at once: waits for approval"
        )
    if not why:
        return decision
    steps = tuple(
        replace(s, needs_approval=True, reason=f"{s.reason}; {why}"[:512]) if s in drains else s
        for s in decision.steps
    )
    tell = Step("notify", audience="operators", params={"severity": "page"}, reason=why)
    return Decision(decision.action, "guard_rail", f"{decision.reason}; {why}", (*steps, tell))


def _jobs(facts: Facts) -> tuple[JobFacts, ...]:
    if facts.job:
        return (facts.job,)
    return facts.jobs_on_host


def _drain(facts: Facts, host: str | None, action: str = Action.CORDON_RESTART) -> list[Step]:
    if not host or host in facts.hosts_drained:
        return []
    then = {Action.RESET_GPU: ": GPU reset needed", Action.REBOOT: ": reboot needed"}
    why = f"{facts.cause} on {host}{then.get(action, '')}"
    # The scheduler's reason carries the mark, so every later plan sees the node is a person's.
    params = {"reason": f"{ESCALATED_MARK}: {facts.cause}"} if action == Action.ESCALATE else {}
    if action == Action.ESCALATE:
        why += f": {ESCALATED_MARK}"
    if not facts.node_evidence:
        why += ", from the job's log only: proposed for approval"
        return [Step("drain", host=host, params=params, reason=why, needs_approval=True)]
    return [Step("drain", host=host, params=params, reason=why)]


def _rollback(job: JobFacts) -> Step:
    """Resubmit from an earlier good checkpoint, skipping the data after it (loss spike)."""
    params: dict = {"resume_checkpoint": "previous", "skip_steps": ""}
    if job.checkpoint_step is not None:
        params["resume_checkpoint"] = str(job.checkpoint_step)
    if job.spike_step is not None:
        first = job.checkpoint_step + 1 if job.checkpoint_step is not None else job.spike_step
        params["skip_steps"] = f"{first}-{job.spike_step}"
    return Step("resubmit", job=job.scheduler_id, params=params, reason="roll back, skip data")


def _notify(
    facts: Facts,
    rule: str,
    why: str,
    escalate: bool = False,
    action: str = Action.NOTIFY.value,
) -> Decision:
    """Tell people; restart nothing. The owner for a job's failure, operators for hardware."""
    audience = "operators" if escalate or facts.job is None else "owner"
    job = facts.job.scheduler_id if facts.job else ""
    params = {"severity": "page"} if escalate else {}
    step = Step("notify", job=job, audience=audience, params=params, reason=why)
    return Decision(action, rule, why, (step,))
