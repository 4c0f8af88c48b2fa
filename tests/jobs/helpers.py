"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.db import connection

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from tests.telemetry.conftest import rollups_current
from webapp.core.windows import Window
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.characterization import (
    cluster_tally,
    window_tally,
)
from webapp.jobs.models import Job, JobAllocation, JobEvent
from webapp.telemetry.partitions import partition_ensure
from webapp.telemetry.services import samples_ingest

T0 = datetime(2026, 3, 1, tzinfo=UTC)


TYPES = ["pretrain", "sft", "mllm", "eval", "debug", "other"]


STATES = [
    "completed",
    "failed",
    "cancelled",
    "timeout",
    "node_fail",
    "preempted",
    "out_of_memory",
    "running",
    "pending",
]


def make_jobs(cluster: Cluster, n: int, seed: int = 7, start: datetime = T0) -> list[Job]:
    """n jobs over 60 days with heavy-tailed durations, some CPU-only, running and pending."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        job_type = rng.choice(TYPES)
        state = rng.choice(STATES)
        submit = start + timedelta(seconds=rng.uniform(0, 60 * 86400))
        queue = rng.choice([0.0, 0.5, 1.0, 3.0, rng.expovariate(1 / 400)])
        begin = None if state == "pending" else submit + timedelta(seconds=queue)
        duration = rng.lognormvariate(5, 2) if job_type != "pretrain" else rng.uniform(1e4, 1e6)
        end = begin + timedelta(seconds=duration) if begin and state != "running" else None
        gpus = 0 if rng.random() < 0.15 else rng.choice([1, 1, 2, 4, 8, 16, 64, 256])
        if job_type == "pretrain" and gpus:
            gpus = rng.choice([128, 256, 512])
        jobs.append(
            Job(
                cluster=cluster,
                scheduler_id=f"{seed}-{i}",
                name=f"{job_type}-{i}",
                user=f"u{i % 5}",
                team=f"t{i % 2}",
                job_type=job_type,
                state=state,
                submit_at=submit,
                start_at=begin,
                end_at=end,
                gpus_requested=gpus,
            )
        )
    return Job.objects.bulk_create(jobs)


def _col(name: str) -> int:
    return 2 + GPU_FIELD_NAMES.index(name)  # a wire row is [index, ts, *GPU_FIELDS]


def ingest(
    cluster: str,
    hostname: str,
    *,
    t0: float,
    intervals: int,
    step_s: float,
    gpus: int,
    util: Callable[[int, int], float] = lambda i, k: 50.0,
    energy_mj: Callable[[int, int], int | None] | None = None,
) -> Node:
    """Samples for `gpus` GPUs at t0 + k*step_s with util(i, k) and energy_mj(i, k)."""
    token = fleet_services.node_token_issue(cluster, hostname)
    batch = make_batch(
        cluster, hostname, token, t0=t0, intervals=intervals, step_s=step_s, gpus=gpus
    )
    for row in batch["samples"]:
        i, k = row[0], round((row[1] - t0) / step_s)
        row[_col("gpu_util")] = util(i, k)
        if energy_mj is not None:
            row[_col("energy_mj")] = energy_mj(i, k)
    samples_ingest(json.dumps(batch))
    rollups_current()
    return Node.objects.get(cluster__name=cluster, hostname=hostname)


def allocate(job: Job, node: Node, indices: list[int], start: datetime, end: datetime | None):
    return JobAllocation.objects.bulk_create(
        JobAllocation(
            job=job,
            node=node,
            gpu=Gpu.objects.get(node=node, index=i) if i % 2 == 0 else None,  # both ways
            gpu_index=i,
            start=start,
            end=end,
        )
        for i in indices
    )


SLOW_NODE = "big-007"  # the node of the one GPU that lags: util 20 % where the rest run 90 %


SLOW_GPU = 3


def big_job(minutes: int = 20) -> Job:
    """A 2,048-GPU job on 256 nodes, a sample a minute per GPU (bulk SQL: the test is about the
    page, not ingest). Every GPU runs at 90 % and 600 W and gains 600 J a second, but one."""
    cluster = Cluster.objects.create(name="big")
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"big-{n:03d}", token_hash=f"h{n}") for n in range(BIG_NODES)
    )
    Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-big-{node.hostname}-{i}", model="NVIDIA H100")
        for node in nodes
        for i in range(BIG_GPUS_PER_NODE)
    )
    t0 = datetime.fromtimestamp(int(time.time() // 60) * 60 - (minutes + 2) * 60, UTC)
    end = t0 + timedelta(minutes=minutes)
    job = Job.objects.create(
        cluster=cluster,
        scheduler_id="9001",
        name="llama-70b-pretrain",
        job_type="pretrain",
        state="completed",
        submit_at=t0,
        start_at=t0,
        end_at=end,
        gpus_requested=BIG_NODES * BIG_GPUS_PER_NODE,
        nodes_requested=BIG_NODES,
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, node=g.node, gpu=g, gpu_index=g.index, start=t0, end=end)
        for g in Gpu.objects.filter(node__cluster=cluster).select_related("node")
    )
    JobEvent.objects.create(
        job=job,
        kind="started",
        ts=t0,
        state="running",
        detail={
            "source": "slurm",
            "sender": "big-000",
            "allocation": {n.hostname: list(range(8)) for n in nodes},
        },
    )
    for day in {t0.date(), end.date()}:
        partition_ensure("telemetry_gpusample", day)
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO telemetry_gpusample (gpu_id, ts, gpu_util, sm_active, fb_used_bytes,
                power_w, gpu_temp_c, energy_mj)
            SELECT g.id, %(t0)s + k * interval '1 minute',
                CASE WHEN n.hostname = %(slow)s AND g.index = %(slow_gpu)s THEN 20 ELSE 90 END,
                0.8, 60 * 2^30, 600, 60, 10^9 + k * 36000000
            FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id,
                generate_series(0, %(minutes)s) k
            WHERE n.cluster_id = %(cluster)s
            """,
            {
                "t0": t0,
                "slow": SLOW_NODE,
                "slow_gpu": SLOW_GPU,
                "minutes": minutes,
                "cluster": cluster.id,
            },
        )
    return job


def assert_tallies_match_jobs(cluster: Cluster) -> None:
    """The cluster's stored tally says exactly what counting its jobs says (GPU time to the
    rounding of a float sum taken in another order)."""
    stored, counted = cluster_tally(cluster), window_tally(Window(cluster))
    assert stored.groups.keys() == counted.groups.keys()
    for key, want in counted.groups.items():
        got = stored.groups[key]
        assert {s: n for s, (n, _) in got.states.items()} == {
            s: n for s, (n, _) in want.states.items()
        }, key
        for state, (_, gpu_time) in want.states.items():
            assert got.states[state][1] == pytest.approx(gpu_time, rel=1e-12, abs=1e-6), key
        for name in ("duration", "queue", "gpus"):
            a, b = getattr(got, name), getattr(want, name)
            assert np.array_equal(a.values, b.values), (key, name)
            assert np.array_equal(a.counts, b.counts), (key, name)


BIG_NODES = 256


BIG_GPUS_PER_NODE = 8
