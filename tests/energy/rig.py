"""A small cluster with six hours of 15 s samples, three jobs and everything that goes wrong
with counters, ingested through the real path; and the independent arithmetic the tests
check the rollups and the report against (plain Python over the samples the rig sent).

Cluster "watt", nodes a (GPUs 0-3, IPMI server power 2,500 W) and b (GPUs 0-3, no IPMI):
  - job 1 (llm / pretrain / completed, alice) holds a0-a3 for hours 0-3 at 350 W, util 90;
  - job 2 (vision / sft / failed, bob) holds b0-b1 for hours 1-4: 300 W util 80 for two
    hours, then 90 W util 2 (allocated but idle) for one; last checkpoint at 3.5 h;
  - job 3 (vision / eval / cancelled, carol) holds b2 for hours 0-2 at 200 W, util 50;
  - every GPU no job holds draws 60 W at util 0 (idle); b3 has no energy counter at all.
Counter trouble: a0's driver reloads at 1.5 h (counter restarts), a1 reads one implausible
value at 2 h, b2's collector is down from 0.5 h to 0.67 h (the counter counts on), and one
batch of node a is delivered twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from collectors.schema import GPU_FIELD_NAMES, NODE_FIELDS
from tests.factory import cluster_make, job_make
from tests.helpers import gpu_row, node_row
from webapp.jobs.models import Job
from webapp.telemetry.services import rollups_refresh, samples_ingest

STEP_S = 15.0
HOURS = 6
H = 3600.0
CLUSTER = "watt"
IPMI_W = 2500.0
BUSY_PCT = 10.0  # VIGIL_BUSY_UTIL_PCT's default
GAP = (0.5 * H, 0.67 * H)  # b2 sends nothing strictly inside


def _col(name: str) -> int:
    return 2 + GPU_FIELD_NAMES.index(name)


def _node_col(name: str) -> int:
    return 1 + [m.name for m in NODE_FIELDS].index(name)


@dataclass(frozen=True)
class JobSpec:
    sid: str
    team: str
    user: str
    job_type: str
    state: str
    gpus: tuple[tuple[str, int], ...]
    start_h: float
    end_h: float
    checkpoint_h: float | None = None
    project: str = ""


JOBS = (
    JobSpec(
        "1",
        "llm",
        "alice",
        "pretrain",
        "completed",
        (("a", 0), ("a", 1), ("a", 2), ("a", 3)),
        0,
        3,
        project="llm-7b",
    ),
    JobSpec("2", "vision", "bob", "sft", "failed", (("b", 0), ("b", 1)), 1, 4, 3.5, "vit-ft"),
    JobSpec("3", "vision", "carol", "eval", "cancelled", (("b", 2),), 0, 2),  # no project
)


def start_time(now: datetime | None = None) -> datetime:
    """Six whole hours in the past, all in one UTC day (so in one calendar month): the daily
    CSV and the month's report then see one day and one month whatever the hour of the run."""
    now = (now or timezone.now()).astimezone(UTC)
    end = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    t0 = end - timedelta(hours=HOURS)
    if t0.date() != (end - timedelta(seconds=1)).date():
        t0 = end.replace(hour=0) - timedelta(hours=HOURS + 1)
    return t0


def job_at(node: str, gpu: int, rel_s: float) -> JobSpec | None:
    for j in JOBS:
        if (node, gpu) in j.gpus and j.start_h * H <= rel_s < j.end_h * H:
            return j
    return None


def power_util(node: str, gpu: int, rel_s: float) -> tuple[float, float]:
    j = job_at(node, gpu, rel_s)
    if j is None:
        return 60.0, 0.0
    if j.sid == "1":
        return 350.0, 90.0
    if j.sid == "3":
        return 200.0, 50.0
    return (300.0, 80.0) if rel_s < 3 * H else (90.0, 2.0)


def sample_times(node: str, gpu: int) -> list[float]:
    out = [k * STEP_S for k in range(int(HOURS * H / STEP_S))]
    if (node, gpu) == ("b", 2):
        out = [t for t in out if not GAP[0] < t < GAP[1]]
    return out


def true_series(node: str, gpu: int) -> list[tuple[float, float, float]]:
    """(relative ts, power W, util %) as the rig sends them."""
    return [(t, *power_util(node, gpu, t)) for t in sample_times(node, gpu)]


def counter_mj(node: str, gpu: int) -> dict[float, int | None]:
    """The NVML counter the rig sends: the running trapezoid of power, with the troubles."""
    if (node, gpu) == ("b", 3):
        return {t: None for t in sample_times(node, gpu)}
    series = true_series(node, gpu)
    out: dict[float, int | None] = {}
    acc = 7e9 + 1e9 * gpu  # mJ since the driver loaded, before the window
    prev = None
    for t, p, _u in series:
        if prev is not None:
            acc += (prev[1] + p) / 2 * (t - prev[0]) * 1000
        if (node, gpu) == ("a", 0) and prev is not None and prev[0] < 1.5 * H <= t:
            acc = (t - 1.5 * H) * p * 1000  # driver reloaded at 1.5 h
        out[t] = int(acc)
        prev = (t, p)
    if (node, gpu) == ("a", 1):
        out[2 * H] += 10**10  # one read 10 MJ high
    return out


def build(t0: datetime) -> dict[str, Job]:
    """Ingest the rig's samples (one batch per node and hour, one delivered twice) and make
    its jobs and allocations; fold the 1-minute rollup."""
    base = t0.timestamp()
    # The nodes' GPUs register on first contact, with the batches below.
    tokens = cluster_make(CLUSTER, {"a": 0, "b": 0}, scheduler=None).tokens
    for host in ("a", "b"):
        token = tokens[host]
        counters = {g: counter_mj(host, g) for g in range(4)}
        for hour in range(HOURS):
            samples = []
            times = set()
            for g in range(4):
                for t in sample_times(host, g):
                    if hour * H <= t < (hour + 1) * H:
                        p, u = power_util(host, g, t)
                        row = gpu_row(g, base + t, util=u, power=p)
                        row[_col("energy_mj")] = counters[g][t]
                        row[_col("power_limit_w")] = 400.0
                        samples.append(row)
                        times.add(t)
            node_samples = []
            for t in sorted(times):
                row = node_row(base + t)
                row[_node_col("gpu_count")] = 4
                row[_node_col("server_power_w")] = IPMI_W if host == "a" else None
                node_samples.append(row)
            batch = {
                "v": 1,
                "batch_id": f"00000000-0000-4000-8000-{ord(host):04d}{hour:08d}",
                "cluster": CLUSTER,
                "node": host,
                "token": token,
                "sent_at": base + (hour + 1) * H,
                "source": "simulated",
                "gpus": [
                    {"index": i, "uuid": f"GPU-watt-{host}-{i}", "name": "NVIDIA A100-SXM4-80GB"}
                    for i in range(4)
                ],
                "samples": samples,
                "node_samples": node_samples,
            }
            samples_ingest(json.dumps(batch))
            if host == "a" and hour == 2:
                samples_ingest(json.dumps(batch))  # redelivered
    jobs = {}
    for j in JOBS:
        start, end = t0 + timedelta(hours=j.start_h), t0 + timedelta(hours=j.end_h)
        jobs[j.sid] = job_make(
            CLUSTER,
            j.sid,
            j.gpus,
            start,
            end,
            user=j.user,
            team=j.team,
            project=j.project,
            job_type=j.job_type,
            state=j.state,
            last_checkpoint_at=t0 + timedelta(hours=j.checkpoint_h) if j.checkpoint_h else None,
        )
    while rollups_refresh() != (0, 0):
        pass
    return jobs


@dataclass
class Expected:
    """Independent figures in kWh (and GPU-hours)."""

    gpu_kwh: float
    by_job: dict[str, float]
    job_hours: dict[str, float]
    idle_kwh: float
    wasted_kwh: float
    by_team: dict[str, float]
    by_project: dict[str, float]
    by_type: dict[str, float]
    by_outcome: dict[str, float]
    lost_kwh: float
    ipmi_kwh: float
    b_gpu_kwh: float
    counter_free_kwh: float  # b3's (integrated)


def expected(t0: datetime, lo: datetime, hi: datetime) -> Expected:
    """Each interval (t_prev, t] costs the trapezoid of its two power readings and belongs to
    the job holding the GPU at t; idle if util at t is under BUSY_PCT."""
    base = t0.timestamp()
    lo_s, hi_s = lo.timestamp() - base, hi.timestamp() - base
    by_job: dict[str, float] = {}
    job_s: dict[str, float] = {}
    idle = wasted = b_gpu = counter_free = 0.0
    for host in ("a", "b"):
        for g in range(4):
            s = true_series(host, g)
            for (ta, pa, _ua), (tb, pb, ub) in zip(s, s[1:], strict=False):
                if not lo_s <= tb < hi_s:
                    continue
                e = (pa + pb) / 2 * (tb - ta) / 3.6e6
                j = job_at(host, g, tb)
                if host == "b":
                    b_gpu += e
                if (host, g) == ("b", 3):
                    counter_free += e
                if j is None:
                    idle += e
                    continue
                by_job[j.sid] = by_job.get(j.sid, 0.0) + e
                job_s[j.sid] = job_s.get(j.sid, 0.0) + (tb - ta)
                if ub < BUSY_PCT:
                    wasted += e
    spec = {j.sid: j for j in JOBS}

    def group(attr):
        out: dict[str, float] = {}
        for sid, e in by_job.items():
            key = getattr(spec[sid], attr) or "(none)"
            out[key] = out.get(key, 0.0) + e
        return out

    j2 = spec["2"]
    lost_gpu_h = len(j2.gpus) * (j2.end_h - j2.checkpoint_h)
    lost = lost_gpu_h * by_job.get("2", 0.0) / (job_s["2"] / H) if "2" in job_s else 0.0
    a_times = [t for t in sample_times("a", 0) if lo_s <= t < hi_s]
    ipmi = IPMI_W * (len(a_times) - 1) * STEP_S / 3.6e6 if a_times else 0.0
    return Expected(
        gpu_kwh=sum(by_job.values()) + idle,
        by_job=by_job,
        job_hours={k: v / H for k, v in job_s.items()},
        idle_kwh=idle,
        wasted_kwh=wasted,
        by_team=group("team"),
        by_project=group("project"),
        by_type=group("job_type"),
        by_outcome=group("state"),
        lost_kwh=lost,
        ipmi_kwh=ipmi,
        b_gpu_kwh=b_gpu,
        counter_free_kwh=counter_free,
    )
