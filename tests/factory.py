"""One factory for the tests: the personas and a small cluster, built through Vigil's own
services (node tokens, GPU registration, the job-event and sample ingest paths), so what a test
reads is what production would have stored.

Personas, as DESIGN.md's readers log in:
- engineer: runs jobs as the scheduler user of the same name (the cluster's jobs run as
  ENGINEER unless a test says otherwise); sees the log lines of their own jobs;
- teammate: an engineer in the team a rule gives the engineer's jobs to, so reads their logs;
- manager: reads the energy pages; logged in and in a team, runs no jobs;
- operator: in the operators group, reads everything;
- outsider: logged in, in no team.

The small cluster: `cluster_make()` gives two nodes of 8 GPUs, the first allowed to send job
events; keyword arguments size it (`nodes`, `gpus`, `jobs`) and name its GPUs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.test import Client

from collectors.schema import GPU_FIELD_NAMES, GpuInfo
from tests.helpers import envelope, make_batch
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job, JobAllocation
from webapp.jobs.services import job_events_ingest
from webapp.teams.models import Team, TeamRule
from webapp.teams.selectors import OPERATORS_GROUP
from webapp.teams.services import team_create
from webapp.telemetry import services as telemetry_services

PASSWORD = "correct-horse-battery"
ENGINEER = "alice"
TEAM = "pretraining"

# --- Personas ---------------------------------------------------------------------------------


def user_make(
    username: str, *, teams: Iterable[str] = (), operator: bool = False
) -> AbstractBaseUser:
    """A user who can log in with PASSWORD, a member of `teams` (made, with no rule, if
    missing), in the operators group with `operator`."""
    user = get_user_model().objects.create_user(username, password=PASSWORD)
    for name in teams:
        team_join(user, name)
    if operator:
        # get_or_create: a transactional test's flush empties the group the migration made.
        group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
        user.groups.add(group)
    return user


def team_join(user: AbstractBaseUser, team: str, rules: Iterable[tuple[str, str]] = ()) -> Team:
    """`user` in `team`, which gets `rules` ((field, pattern), as teams.services.team_create
    takes them): the team is made if missing, else the user and the rules are added."""
    found = Team.objects.filter(name=team).first()
    if found is None:
        return team_create(team, users=[user], rules=rules)
    found.users.add(user)
    order = 10 + max(TeamRule.objects.values_list("order", flat=True), default=90)  # after all
    for i, (field_name, pattern) in enumerate(rules):
        found.rules.get_or_create(
            field=field_name, pattern=pattern, defaults={"order": order + 10 * i}
        )
    return found


def engineer_make(username: str = ENGINEER) -> AbstractBaseUser:
    """Runs jobs as scheduler user `username`; in no team."""
    return user_make(username)


def teammate_make(
    username: str = "carol", *, of: str = ENGINEER, team: str = TEAM
) -> AbstractBaseUser:
    """In `team`, which a rule gives the jobs of scheduler user `of`."""
    user = user_make(username)
    team_join(user, team, rules=[("user", of)])
    return user


def manager_make(username: str = "dana", *, team: str = TEAM) -> AbstractBaseUser:
    """Reads the energy pages: in `team` (made, with no rule, if missing), runs no jobs."""
    return user_make(username, teams=[team])


def operator_make(username: str = "operator") -> AbstractBaseUser:
    return user_make(username, operator=True)


def outsider_make(username: str = "mallory") -> AbstractBaseUser:
    """Logged in, in no team."""
    return user_make(username)


def client_for(user: AbstractBaseUser) -> Client:
    """A test client logged in as `user`."""
    c = Client()
    c.force_login(user)
    return c


# --- A small cluster --------------------------------------------------------------------------


def job_event_batch(
    cluster: str, node: str, token: str, /, *events: dict, **overrides: object
) -> dict:
    """A JobEventBatch (as a dict) carrying `events`, sent by `node`; `overrides` replace any
    field (node and token included)."""
    batch = {**envelope(cluster, node, token), "source": "slurm", "events": list(events)}
    batch.update(overrides)
    return batch


def _gpu_col(name: str) -> int:
    return 2 + GPU_FIELD_NAMES.index(name)  # a wire row is [index, ts, *GPU_FIELDS]


def rollups_current() -> None:
    """Bring the 1-minute rollup up to date, as the periodic refresh does in production."""
    while telemetry_services.rollups_refresh() != (0, 0):
        pass


def samples_send(
    cluster: str,
    hostname: str,
    *,
    utils: Sequence[float],
    powers: Sequence[float] | None = None,
    t0: float | None = None,
    intervals: int = 3,
    step_s: float = 10.0,
    latest: Mapping[int, Mapping[str, float | int]] | None = None,
) -> Node:
    """Ingest `intervals` samples per GPU of the node (one GPU per entry of `utils`, named
    GPU-<cluster>-<hostname>-NN) and fold the rollup. Only the newest sample carries `utils`,
    `powers` (300 W if not given) and `latest`'s metrics; older ones read util 1 % and 100 W,
    so a page that shows them instead of the newest is caught."""
    token = fleet_services.node_token_issue(cluster, hostname)
    batch = make_batch(
        cluster,
        hostname,
        token,
        t0=t0,
        intervals=intervals,
        step_s=step_s,
        gpus=len(utils),
        uuid_prefix=f"GPU-{cluster}-{hostname}",
    )
    newest = max(row[1] for row in batch["samples"])
    for row in batch["samples"]:
        index = row[0]
        if row[1] == newest:
            row[_gpu_col("gpu_util")] = utils[index]
            row[_gpu_col("power_w")] = powers[index] if powers else 300.0
            for name, value in (latest or {}).get(index, {}).items():
                row[_gpu_col(name)] = value
        else:
            row[_gpu_col("gpu_util")] = 1.0
            row[_gpu_col("power_w")] = 100.0
    telemetry_services.samples_ingest(json.dumps(batch))
    rollups_current()
    return Node.objects.get(cluster__name=cluster, hostname=hostname)


@dataclass
class SmallCluster:
    """A cluster Vigil knows: each node's token, and which node sends the job events."""

    cluster: str
    tokens: dict[str, str]
    scheduler: str | None = None
    gpus: dict[str, int] = field(default_factory=dict)  # GPUs registered, per node

    def node(self, hostname: str) -> Node:
        return Node.objects.get(cluster__name=self.cluster, hostname=hostname)

    def gpu(self, hostname: str, index: int) -> Gpu:
        return Gpu.objects.get(
            node__cluster__name=self.cluster, node__hostname=hostname, index=index
        )

    def node_batch(self, node: str, gpu_events=(), log_windows=(), **overrides: object) -> str:
        """A node-event batch (JSON) of GPU events and job log windows, sent by `node`."""
        batch = {
            **envelope(self.cluster, node, self.tokens[node]),
            "gpu_events": list(gpu_events),
            "log_windows": list(log_windows),
        }
        batch.update(overrides)
        return json.dumps(batch)

    def job_batch(self, *events: dict) -> str:
        """A job-event batch (JSON) sent by the scheduler node."""
        if self.scheduler is None:
            raise ValueError(f"cluster {self.cluster}: no node may send job events")
        return json.dumps(
            job_event_batch(self.cluster, self.scheduler, self.tokens[self.scheduler], *events)
        )

    def run_job(
        self,
        job_id: str,
        start: float,
        end: float | None,
        *,
        state: str = "FAILED",
        nodes: tuple[str, ...] | None = None,
        gpus: int | None = None,
        exit_code: int = 1,
        job_type: str = "pretrain",
        user: str = ENGINEER,
        last_checkpoint_ts: float | None = None,
    ) -> None:
        """Start a job on `nodes` (by default every node with GPUs), GPUs 0 to gpus-1 of
        each (by default as many as the smallest has, 8 if none is registered), and with `end`
        end it in `state`, through the job-event ingest."""
        nodes = nodes or tuple(host for host, n in self.gpus.items() if n)
        if gpus is None:
            gpus = min(self.gpus.get(n) or 8 for n in nodes)
        alloc = [{"node": n, "gpu_indices": list(range(gpus))} for n in nodes]
        events = [
            {
                "job_id": job_id,
                "kind": "started",
                "ts": start,
                "name": f"train-{job_id}",
                "user": user,
                "job_type": job_type,
                "allocation": alloc,
                "gpus_requested": gpus * len(nodes),
                "nodes_requested": len(nodes),
                **({"last_checkpoint_ts": last_checkpoint_ts} if last_checkpoint_ts else {}),
            }
        ]
        if end is not None:
            events.append(
                {
                    "job_id": job_id,
                    "kind": "ended",
                    "ts": end,
                    "state": state,
                    "exit_code": exit_code,
                }
            )
        job_events_ingest(self.job_batch(*events))

    def samples_send(self, hostname: str, **kwargs) -> Node:
        """Samples of the node through the ingest path (`samples_send`'s arguments)."""
        return samples_send(self.cluster, hostname, **kwargs)


def job_make(
    cluster: str,
    scheduler_id: str,
    gpus: Sequence[tuple[str, int]],
    start: datetime,
    end: datetime | None = None,
    **fields: object,
) -> Job:
    """A job holding `gpus` ((hostname, index), registered GPUs of `cluster`) from `start` to
    `end`, written straight to the job and allocation tables with `fields` (user, team,
    project, job_type, state...: by default ENGINEER's, completed, or running without `end`).
    For rigs that set what the event path works out itself (team, project, a past job's
    state) or need many jobs fast; run_job goes through the scheduler's events."""
    found = {
        (gpu.node.hostname, gpu.index): gpu
        for gpu in Gpu.objects.filter(node__cluster__name=cluster).select_related("node")
    }
    missing = [f"{host}:{index}" for host, index in gpus if (host, index) not in found]
    if missing:
        raise ValueError(f"job {scheduler_id}: no GPU {', '.join(missing)} in cluster {cluster}")
    defaults = {
        "name": f"job-{scheduler_id}",
        "user": ENGINEER,
        "state": JobState.COMPLETED if end else JobState.RUNNING,
        "submit_at": start,
        "start_at": start,
        "end_at": end,
        "gpus_requested": len(gpus),
    }
    job = Job.objects.create(
        cluster=Cluster.objects.get(name=cluster), scheduler_id=scheduler_id, **defaults | fields
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(
            job=job,
            node=found[key].node,
            gpu=found[key],
            gpu_index=key[1],
            start=start,
            end=end,
        )
        for key in gpus
    )
    return job


def cluster_make(
    cluster: str = "testcluster",
    nodes: int | Sequence[str] | Mapping[str, int] = 2,
    gpus: int = 8,
    *,
    scheduler: str | None | bool = True,
    jobs: int = 0,
    gpu_name: str = "A100",
    uuid_format: str = "GPU-{cluster}-{host}-{index:02d}",
    pci_format: str | None = None,
) -> SmallCluster:
    """A cluster of `nodes` (a count, named gpu-node-01...; hostnames; or {hostname: GPUs}),
    each with its token and `gpus` GPUs registered as its agent would (none with 0).

    `scheduler`: True lets the first node send job events, a hostname names the node, None
    lets none. `jobs` completed jobs (ids 100, 101...) then ran on every node with GPUs, an
    hour each, the last ending an hour ago. `uuid_format` and `pci_format` name each GPU from
    `cluster`, `host`, `node_no` (from 1) and `index`; no PCI bus id without `pci_format`.
    """
    if isinstance(nodes, int):
        nodes = [f"gpu-node-{n:02d}" for n in range(1, nodes + 1)]
    sizes = dict(nodes) if isinstance(nodes, Mapping) else dict.fromkeys(nodes, gpus)
    if not sizes:
        raise ValueError(f"cluster {cluster}: no nodes")
    if scheduler is True:
        scheduler = next(iter(sizes))
    elif scheduler is False:
        scheduler = None
    if scheduler is not None and scheduler not in sizes:
        raise ValueError(f"scheduler {scheduler!r}: not one of the nodes {', '.join(sizes)}")
    tokens = {}
    for node_no, (host, count) in enumerate(sizes.items(), 1):
        tokens[host] = fleet_services.node_token_issue(cluster, host)
        if host == scheduler:
            fleet_services.node_scheduler_grant(cluster, host)
        if not count:
            continue
        node = fleet_services.node_authenticate(cluster, host, tokens[host])
        names = {"cluster": cluster, "host": host, "node_no": node_no}
        fleet_services.gpus_register(
            node.id,
            [
                GpuInfo(
                    index=i,
                    uuid=uuid_format.format(index=i, **names),
                    name=gpu_name,
                    pci_bus_id=pci_format.format(index=i, **names) if pci_format else None,
                )
                for i in range(count)
            ],
        )
    made = SmallCluster(cluster, tokens, scheduler, sizes)
    now = float(int(time.time()))
    for k in range(jobs):
        end = now - 3600 * (jobs - k)
        made.run_job(str(100 + k), end - 3600, end, state="COMPLETED", exit_code=0)
    return made
