"""Ingest in-process: what is stored, what is refused (whole, with a reason), and the rollup."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from collectors.schema import GPU_FIELD_NAMES, NODE_FIELD_NAMES, BatchError
from tests.helpers import make_batch
from tests.telemetry.conftest import plan_json, plan_scans
from tests.telemetry.helpers import REFUSE_MODEL_SQL, poisoned
from webapp.core.models import RejectedBatch
from webapp.core.refusals import AuthError, batch_reject
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Gpu, Node
from webapp.telemetry import services as telemetry_services
from webapp.telemetry.models import GpuLatest, GpuRollup1m, GpuSample, NodeSample, RollupDirty
from webapp.telemetry.partitions import partition_name, partitions_maintain
from webapp.telemetry.services import (
    rollups_refresh,
    samples_ingest,
    samples_ingest_many,
)


def _count(table: str) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        return cur.fetchone()[0]


def _stored_nothing() -> bool:
    return (
        _count("telemetry_gpusample") == 0
        and _count("telemetry_nodesample") == 0
        and _count("telemetry_gpurollup1m") == 0
    )


def test_batch_is_stored_with_values_nulls_and_inventory(node_token):
    cluster, node, token = node_token
    batch = make_batch(cluster, node, token, intervals=3)
    result = samples_ingest(json.dumps(batch))

    assert result.samples == result.samples_stored == 24
    assert result.node_samples_stored == 3
    assert Gpu.objects.filter(node__hostname=node).count() == 8
    sample = GpuSample.objects.filter(gpu__index=3).order_by("ts").first()
    assert sample.gpu_util == 50.0
    assert sample.power_w == 300.0
    assert sample.fb_used_bytes == 40 * 2**30
    # Unsupported metrics arrive as null and stay null, never 0.
    assert sample.tensor_active is None
    assert sample.nvlink_replay is None
    assert abs(sample.ts.timestamp() - batch["samples"][3][1]) < 1e-3
    assert NodeSample.objects.count() == 3
    node_row = Node.objects.get(hostname=node)
    assert node_row.state == "up"
    assert abs(node_row.last_seen.timestamp() - batch["samples"][-1][1]) < 1e-3


def test_same_batch_twice_is_stored_once(node_token):
    cluster, node, token = node_token
    raw = json.dumps(make_batch(cluster, node, token, intervals=5))
    first = samples_ingest(raw)
    second = samples_ingest(raw)

    assert first.samples_stored == 40
    assert second.samples_stored == 0 and second.duplicates == 40
    assert GpuSample.objects.count() == 40
    assert NodeSample.objects.count() == 5
    rollups_refresh()
    assert sum(GpuRollup1m.objects.values_list("n", flat=True)) == 40


def test_batches_stored_together_each_keep_their_own_outcome(node_token):
    """A worker stores the batches it has taken in one transaction: a refused one refuses
    only itself (recorded in the same transaction), and the rest are stored whole, with
    their rollup marks."""
    cluster, node, token = node_token
    t0 = time.time() - 600
    first = make_batch(cluster, node, token, t0=t0, intervals=2)
    wrong_token = make_batch(cluster, node, "wrong-token-" + "x" * 30, t0=t0 + 20, intervals=2)
    malformed = make_batch(cluster, node, token, t0=t0 + 40, intervals=2)
    malformed["samples"][0][2] = "busy"
    last = make_batch(cluster, node, token, t0=t0 + 60, intervals=3)

    outcomes = samples_ingest_many([json.dumps(b) for b in (first, wrong_token, malformed, last)])

    assert outcomes[0].batch_id == first["batch_id"] and outcomes[0].samples_stored == 16
    assert outcomes[3].batch_id == last["batch_id"] and outcomes[3].samples_stored == 24
    assert (outcomes[1].batch_id, outcomes[1].reason) == (wrong_token["batch_id"], "bad_token")
    assert (outcomes[2].batch_id, outcomes[2].reason) == (malformed["batch_id"], "malformed")
    assert RejectedBatch.objects.count() == 2
    assert GpuSample.objects.count() == 40
    assert NodeSample.objects.count() == 5
    rollups_refresh()
    assert sum(GpuRollup1m.objects.values_list("n", flat=True)) == 40


def test_a_batch_twice_in_one_group_is_stored_once(node_token):
    """A redelivered batch can meet its first copy in the same group: the group's COPY fails
    on the duplicate, and each batch then stores only what is new."""
    cluster, node, token = node_token
    t0 = time.time() - 600
    raw = json.dumps(make_batch(cluster, node, token, t0=t0, intervals=3))
    other = json.dumps(make_batch(cluster, node, token, t0=t0 + 30, intervals=2))

    first, again, later = samples_ingest_many([raw, raw, other])

    assert (first.samples_stored, again.samples_stored, later.samples_stored) == (24, 0, 16)
    assert again.duplicates == 24 and again.node_samples_stored == 0
    assert GpuSample.objects.count() == 40
    assert NodeSample.objects.count() == 5
    rollups_refresh()
    assert sum(GpuRollup1m.objects.values_list("n", flat=True)) == 40


def test_overlapping_batch_stores_only_new_samples(node_token):
    cluster, node, token = node_token
    t0 = time.time() - 600
    samples_ingest(json.dumps(make_batch(cluster, node, token, t0=t0, intervals=4)))
    overlap = samples_ingest(json.dumps(make_batch(cluster, node, token, t0=t0 + 20, intervals=4)))

    assert overlap.samples_stored == 16  # intervals 2 and 3 were stored already
    assert GpuSample.objects.count() == 48


def test_node_samples_keep_values_nulls_and_the_time_of_the_gpu_samples(node_token):
    cluster, node, token = node_token
    batch = make_batch(cluster, node, token, intervals=2)
    batch["node_samples"][1][1 + NODE_FIELD_NAMES.index("net_rx_bytes_s")] = 1.5e9
    batch["node_samples"][1][1 + NODE_FIELD_NAMES.index("gpu_count")] = None
    # Beyond the range of real: stored as infinity, as in a GPU row, not a failed batch.
    batch["node_samples"][1][1 + NODE_FIELD_NAMES.index("server_power_w")] = 1e39
    samples_ingest(json.dumps(batch))

    first, second = NodeSample.objects.order_by("ts")
    assert (first.cpu_util, first.mem_util, first.gpu_count) == (20.0, 30.0, 8)
    assert first.net_rx_bytes_s is None and first.server_power_w is None
    assert (second.net_rx_bytes_s, second.gpu_count) == (1.5e9, None)
    assert second.server_power_w == math.inf
    assert first.ts == GpuSample.objects.filter(gpu__index=0).order_by("ts").first().ts


def test_batch_with_stored_node_samples_stores_its_new_gpu_samples(node_token):
    cluster, node, token = node_token
    t0 = time.time() - 600
    first = make_batch(cluster, node, token, t0=t0, intervals=3)
    samples_ingest(json.dumps(first))
    later = make_batch(cluster, node, token, t0=t0 + 30, intervals=3)
    result = samples_ingest(json.dumps(dict(later, node_samples=first["node_samples"])))

    assert (result.samples_stored, result.node_samples_stored) == (24, 0)
    assert (GpuSample.objects.count(), NodeSample.objects.count()) == (48, 3)
    assert RollupDirty.objects.count() == 2  # the new minutes wait for the rollup
    rollups_refresh()
    assert sum(GpuRollup1m.objects.values_list("n", flat=True)) == 48
    assert abs(Node.objects.get(hostname=node).last_seen.timestamp() - (t0 + 50)) < 1e-3


def test_batch_with_stored_gpu_samples_stores_its_new_node_samples(node_token):
    cluster, node, token = node_token
    t0 = time.time() - 600
    first = make_batch(cluster, node, token, t0=t0, intervals=3)
    samples_ingest(json.dumps(first))
    Node.objects.filter(hostname=node).update(state=NodeState.DRAINING)
    later = make_batch(cluster, node, token, t0=t0 + 30, intervals=3)
    result = samples_ingest(json.dumps(dict(later, samples=first["samples"])))

    assert (result.samples_stored, result.node_samples_stored) == (0, 3)
    assert (GpuSample.objects.count(), NodeSample.objects.count()) == (24, 6)
    assert RollupDirty.objects.count() == 1  # no new GPU sample, nothing new to roll up
    seen = Node.objects.get(hostname=node)
    assert abs(seen.last_seen.timestamp() - (t0 + 50)) < 1e-3
    assert seen.state == NodeState.DRAINING  # reporting does not undrain a node


def test_rollup_holds_min_mean_max_per_gpu_and_minute(node_token):
    cluster, node, token = node_token
    minute = (int(time.time()) // 60 - 5) * 60
    batch = make_batch(cluster, node, token, t0=minute, intervals=6, step_s=10, gpus=1)
    for k, row in enumerate(batch["samples"]):
        row[2 + GPU_FIELD_NAMES.index("gpu_util")] = [0, 100, 40, 60, None, 20][k]
        row[2 + GPU_FIELD_NAMES.index("power_w")] = 100.0 + k
    # The same minute arrives in two batches, the second after the minute was rolled up once;
    # the rollup must still cover all six samples.
    first = dict(batch, samples=batch["samples"][:3])
    second = dict(batch, samples=batch["samples"][3:], batch_id="0" * 8 + batch["batch_id"][8:])
    samples_ingest(json.dumps(first))
    assert rollups_refresh() == (1, 1)
    samples_ingest(json.dumps(second))
    samples_ingest(json.dumps(second))  # redelivery changes nothing
    rollups_refresh()

    roll = GpuRollup1m.objects.get()
    assert roll.minute.timestamp() == minute
    assert roll.n == 6
    assert roll.gpu_util_cnt == 5
    assert (roll.gpu_util_min, roll.gpu_util_max) == (0, 100)
    assert math.isclose(roll.gpu_util_sum / roll.gpu_util_cnt, 44.0)
    assert (roll.power_w_min, roll.power_w_max) == (100.0, 105.0)


def _bad(batch: dict, **changes) -> str:
    batch = dict(batch)
    batch.update(changes)
    return json.dumps(batch)


def _with_value(batch: dict, field: str, value) -> dict:
    samples = [list(r) for r in batch["samples"]]
    samples[-1][2 + GPU_FIELD_NAMES.index(field)] = value
    return dict(batch, samples=samples)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("unknown_node", "unknown_node"),
        ("wrong_token", "bad_token"),
        ("malformed_field", "malformed"),
        ("out_of_range", "malformed"),
        ("future_timestamp", "future_timestamp"),
        ("nan", "not_a_number"),
        ("not_json", "malformed"),
        ("unknown_gpu_index", "malformed"),
        ("expired", "expired"),
    ],
)
def test_bad_batch_is_refused_whole_and_nothing_written(node_token, case, reason):
    cluster, node, token = node_token
    good = make_batch(cluster, node, token, intervals=2)
    raw = {
        "unknown_node": _bad(good, node="no-such-node"),
        "wrong_token": _bad(good, token="x" * 43),
        "malformed_field": json.dumps(_with_value(good, "power_w", "lots")),
        "out_of_range": json.dumps(_with_value(good, "gpu_util", 250.0)),
        "future_timestamp": _bad(
            good, samples=[*good["samples"][:-1], [0, time.time() + 3600, *good["samples"][0][2:]]]
        ),
        # Python's json writes NaN as a bare token, as a careless collector would.
        "nan": json.dumps(_with_value(good, "gpu_temp_c", float("nan"))),
        "not_json": '{"v": 1, "samples": [[0, 1',
        "unknown_gpu_index": _bad(good, samples=[[9, *good["samples"][0][1:]]]),
        "expired": json.dumps(make_batch(cluster, node, token, t0=time.time() - 40 * 86400)),
    }[case]

    with pytest.raises((BatchError, AuthError)) as excinfo:
        samples_ingest(raw)
    assert excinfo.value.reason == reason
    batch_reject(raw, excinfo.value)

    assert _stored_nothing()
    rejected = RejectedBatch.objects.get()
    assert rejected.reason == reason
    assert rejected.detail  # names the problem for the log
    if case not in ("not_json", "unknown_node"):
        assert rejected.node == node
    # The valid batch still goes through afterwards: a bad batch breaks nothing.
    assert samples_ingest(json.dumps(good)).samples_stored == 16


def test_rejection_detail_names_the_field(node_token):
    cluster, node, token = node_token
    raw = json.dumps(_with_value(make_batch(cluster, node, token), "power_w", -5.0))
    with pytest.raises(BatchError) as excinfo:
        samples_ingest(raw)
    assert "samples.7.10" in excinfo.value.detail  # row 7, column power_w
    assert "greater than or equal to 0" in excinfo.value.detail


def test_token_rotation_locks_out_the_old_token(node_token):
    from webapp.fleet.services import node_token_issue

    cluster, node, token = node_token
    samples_ingest(json.dumps(make_batch(cluster, node, token)))
    new_token = node_token_issue(cluster, node)
    with pytest.raises(AuthError):
        samples_ingest(json.dumps(make_batch(cluster, node, token)))
    assert samples_ingest(json.dumps(make_batch(cluster, node, new_token))).samples_stored == 8


def test_issued_tokens_work_as_a_collector_argument(node_token):
    """An operator pastes the token after --token; none may read as an option."""
    from collectors.__main__ import build_parser
    from webapp.fleet.services import node_token_issue

    cluster, node, _token = node_token
    for _ in range(200):  # a base64 token starts with "-" one time in 64
        token = node_token_issue(cluster, node)
        assert build_parser().parse_args(["--token", token]).token == token


def test_gpu_moved_to_another_node_keeps_its_identity(db):
    from webapp.fleet.services import node_token_issue

    ta = node_token_issue("c1", "node-a")
    tb = node_token_issue("c1", "node-b")
    samples_ingest(json.dumps(make_batch("c1", "node-a", ta, gpus=2, uuid_prefix="GPU-X")))
    # Pulled from node-a, which has stopped reporting (a live node's GPU is not taken over).
    Node.objects.filter(hostname="node-a").update(last_contact_at=datetime(2020, 1, 1, tzinfo=UTC))
    samples_ingest(json.dumps(make_batch("c1", "node-b", tb, gpus=1, uuid_prefix="GPU-X")))

    gpu = Gpu.objects.get(uuid="GPU-X-00")
    assert gpu.node.hostname == "node-b"
    assert Gpu.objects.filter(uuid__startswith="GPU-X").count() == 2


def test_a_batch_that_fails_to_store_is_refused_alone_and_its_group_is_stored(node_token):
    """One batch that PostgreSQL refuses (a GPU model it refuses; a row breaking a CHECK,
    which makes the group's own statements fail) costs only itself, recorded with the
    exception; the other batches of the group are stored whole."""
    cluster, node, token = node_token
    with connection.cursor() as cur:
        # A row the database refuses at the group's COPY / insert, as a value out of range
        # for its column would be (rolled back with the test's transaction).
        cur.execute(
            "ALTER TABLE telemetry_nodesample ADD CONSTRAINT test_no_77 CHECK (cpu_util <> 77)"
        )
        cur.execute(REFUSE_MODEL_SQL)
    t0 = time.time() - 600
    batches = [make_batch(cluster, node, token, t0=t0 + i * 20, intervals=2) for i in range(5)]
    batches[1] = poisoned(batches[1])
    batches[3]["node_samples"][0][1 + NODE_FIELD_NAMES.index("cpu_util")] = 77.0

    outcomes = samples_ingest_many([json.dumps(b) for b in batches])

    assert [o.samples_stored for o in (outcomes[0], outcomes[2], outcomes[4])] == [16] * 3
    assert (outcomes[1].reason, outcomes[3].reason) == ("store_failed", "store_failed")
    assert outcomes[1].batch_id == batches[1]["batch_id"]
    assert (
        outcomes[1].detail.startswith("IntegrityError: ")
        and "test_refused_model" in outcomes[1].detail
    )
    assert outcomes[3].detail.startswith("CheckViolation: ") and "test_no_77" in outcomes[3].detail
    assert RejectedBatch.objects.count() == 2
    assert (GpuSample.objects.count(), NodeSample.objects.count()) == (48, 6)
    assert RollupDirty.objects.count() == 3  # one per stored batch, none of a refused one
    assert not Gpu.objects.filter(uuid="GPU-swapped-in").exists()


def test_samples_ingest_raises_what_storing_raised(node_token):
    """The one-batch service leaves the policy to its caller (webapp/core/ingest.py)."""
    from django.db import IntegrityError

    cluster, node, token = node_token
    with connection.cursor() as cur:
        cur.execute(REFUSE_MODEL_SQL)  # rolled back with the test's transaction
    with pytest.raises(IntegrityError):
        samples_ingest(json.dumps(poisoned(make_batch(cluster, node, token))))
    assert RejectedBatch.objects.count() == 0 and _stored_nothing()


# --- The latest sample per GPU -------------------------------------------------------------


def _latest(node: str) -> dict[int, tuple[float, float]]:
    """{GPU index: (ts, gpu_util)} of the node's rows in the latest-values table."""
    return {
        index: (ts.timestamp(), util)
        for index, ts, util in GpuLatest.objects.filter(gpu__node__hostname=node).values_list(
            "gpu__index", "ts", "gpu_util"
        )
    }


def _with_util(batch: dict, util: float) -> dict:
    for row in batch["samples"]:
        row[2 + GPU_FIELD_NAMES.index("gpu_util")] = util
    return batch


def test_latest_table_follows_the_newest_batch_only(node_token):
    cluster, node, token = node_token
    t = float(int(time.time()) - 120)
    newer = _with_util(make_batch(cluster, node, token, t0=t, gpus=2), 0.3)
    samples_ingest(json.dumps(newer))
    assert _latest(node) == {0: (t, pytest.approx(0.3)), 1: (t, pytest.approx(0.3))}
    # A late batch (older samples) and a redelivery leave it alone; a newer one moves it.
    samples_ingest(json.dumps(_with_util(make_batch(cluster, node, token, t0=t - 60, gpus=2), 9)))
    samples_ingest(json.dumps(newer))
    assert _latest(node)[0] == (t, pytest.approx(0.3))
    samples_ingest(json.dumps(_with_util(make_batch(cluster, node, token, t0=t + 15, gpus=2), 5)))
    assert _latest(node)[1] == (t + 15, 5.0)
    # The values are the stored sample's, as PostgreSQL stores it (real).
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM telemetry_gpulatest l JOIN telemetry_gpusample s "
            "USING (gpu_id, ts) WHERE s.gpu_util = l.gpu_util AND s.power_w = l.power_w"
        )
        assert cur.fetchone()[0] == 2


def test_latest_table_of_a_group_takes_the_newest_of_its_batches(node_token):
    cluster, node, token = node_token
    t = float(int(time.time()) - 120)
    # Newest first in the group, and the older one overlapping the stored rows (the group then
    # stores one batch at a time): the newest still wins.
    samples_ingest(json.dumps(make_batch(cluster, node, token, t0=t - 30, gpus=2)))
    group = [
        _with_util(make_batch(cluster, node, token, t0=t, gpus=2), 7),
        _with_util(make_batch(cluster, node, token, t0=t - 30, intervals=2, gpus=2), 1),
    ]
    samples_ingest_many([json.dumps(b) for b in group])
    assert _latest(node) == {0: (t, 7.0), 1: (t, 7.0)}


# --- The rollup refresh, bounded --------------------------------------------------------------


def test_rollup_refresh_is_bounded_per_run_and_leaves_the_rest(node_token, monkeypatch):
    cluster, node, token = node_token
    minute = (int(time.time()) // 60 - 10) * 60
    for k in range(3):  # three batches, each 8 GPUs x one minute = 8 cells
        samples_ingest(json.dumps(make_batch(cluster, node, token, t0=minute + 60 * k)))
    monkeypatch.setattr(telemetry_services, "ROLLUP_CELLS_PER_STATEMENT", 8)
    assert rollups_refresh(max_rounds=1) == (1, 8)
    assert RollupDirty.objects.count() == 2 and GpuRollup1m.objects.count() == 8
    assert rollups_refresh() == (2, 16)  # the next run does the rest
    assert GpuRollup1m.objects.count() == 24 and not RollupDirty.objects.exists()


def test_rollup_refresh_reads_only_the_partitions_of_its_minutes_by_index(node_token):
    cluster, node, token = node_token
    now = time.time()
    for days_ago in (2, 1, 0):
        t0 = now - days_ago * 86400 - 60
        samples_ingest(json.dumps(make_batch(cluster, node, token, t0=t0)))
        if days_ago:
            rollups_refresh()  # older days are rolled up already
    partitions_maintain()
    # Statistics as autovacuum leaves them at some point of a full run (with them, the planner
    # rightly prefers a Seq Scan over a partition of a few hundred rows): the same every run.
    with connection.cursor() as cur:
        cur.execute("ANALYZE telemetry_gpusample")
    with CaptureQueriesContext(connection) as ctx:
        assert rollups_refresh() == (1, 8)
    [refresh] = [q["sql"] for q in ctx.captured_queries if "LATERAL" in q["sql"]]
    scans = plan_scans(refresh, index_only=True)
    sample_scans = [(kind, rel) for kind, rel in scans if rel.startswith("telemetry_gpusample")]
    today = datetime.fromtimestamp(now - 60, UTC).date()
    # Partition pruning is decided by the statement's constant bounds, whatever the statistics.
    assert {rel for _, rel in sample_scans} == {partition_name("telemetry_gpusample", today)}
    # Each cell's range can be read from the primary key, never only by a whole-partition
    # scan (planned with sequential scans priced out: on a few hundred rows the planner may
    # rightly prefer one, depending on whether autovacuum has analysed the partition yet).
    assert {kind for kind, _ in sample_scans} <= {"Index Scan", "Index Only Scan"}
    # The cells are walked in key order: the loop over them takes them from a sort, so that
    # neighbouring lookups share index pages.
    plan = plan_json(refresh, index_only=True)

    def nodes(node: dict):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    [loop] = [
        n
        for n in nodes(plan)
        if n["Node Type"] == "Nested Loop"
        and any(c.get("Relation Name", "").startswith("telemetry_gpusample") for c in nodes(n))
    ]
    outer = loop["Plans"][0]
    assert any(n["Node Type"] == "Sort" for n in nodes(outer)), outer["Node Type"]
