"""Characterization numbers against an independent pure-Python computation, windows, exports,
the reference data, and `manage.py characterize`."""

from __future__ import annotations

import csv
import io
import json
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.jobs.helpers import T0, TYPES, make_jobs
from tests.telemetry.conftest import seed_node
from webapp.core.windows import Window
from webapp.fleet.models import Cluster
from webapp.jobs.characterization import jobs_characterize, telemetry_cdfs
from webapp.jobs.data import reference
from webapp.jobs.management.commands.characterize import summary_rows
from webapp.jobs.models import Job

# Written out here, not taken from JobState.final_group, so the test checks the SQL mapping.
GROUP = {
    "completed": "completed",
    "cancelled": "cancelled",
    "preempted": "cancelled",
    "failed": "failed",
    "timeout": "failed",
    "node_fail": "failed",
    "out_of_memory": "failed",
}


def expected(jobs: list[Job]) -> dict:
    """The numbers computed in plain Python from the job list."""
    gpu = [j for j in jobs if j.gpus_requested > 0]

    def dur(j: Job) -> float | None:
        return (j.end_at - j.start_at).total_seconds() if j.end_at and j.start_at else None

    def que(j: Job) -> float | None:
        return (j.start_at - j.submit_at).total_seconds() if j.start_at else None

    def gpu_time(j: Job) -> float:
        d = dur(j)
        return d * j.gpus_requested if d is not None else 0.0

    total_time = sum(gpu_time(j) for j in gpu)
    out: dict = {"jobs": len(jobs), "gpu_jobs": len(gpu), "types": {}, "states": {}}
    for t in TYPES:
        mine = [j for j in gpu if j.job_type == t]
        if not mine:
            continue
        ds = [d for j in mine if (d := dur(j)) is not None]
        qs = [q for j in mine if (q := que(j)) is not None]
        out["types"][t] = {
            "gpu_jobs": len(mine),
            "count_share": len(mine) / len(gpu),
            "gpu_time_share": sum(gpu_time(j) for j in mine) / total_time,
            "duration_median_s": statistics.median(ds) if ds else None,
            "duration_mean_s": statistics.fmean(ds) if ds else None,
            "queue_median_s": statistics.median(qs) if qs else None,
            "queue_mean_s": statistics.fmean(qs) if qs else None,
        }
    final = [j for j in gpu if j.state in GROUP]
    final_time = sum(gpu_time(j) for j in final)
    for g in ("completed", "cancelled", "failed"):
        mine = [j for j in final if GROUP[j.state] == g]
        out["states"][g] = {
            "count_share": len(mine) / len(final),
            "gpu_time_share": sum(gpu_time(j) for j in mine) / final_time,
        }
    sizes = [j.gpus_requested for j in gpu]
    out["gpus"] = {"mean": statistics.fmean(sizes), "median": statistics.median(sizes)}
    out["gpus"]["max"] = max(sizes)
    ds = [d for j in gpu if (d := dur(j)) is not None]
    out["duration_below"] = {k: sum(d < 2**k for d in ds) / len(ds) for k in range(25)}
    out["gpus_at_most"] = {g: sum(s <= g for s in sizes) / len(sizes) for g in set(sizes)}
    return out


@pytest.fixture
def acme(db) -> Cluster:
    return Cluster.objects.create(name="acme")


@pytest.fixture
def seeded(acme) -> list[Job]:
    other = Cluster.objects.create(name="elsewhere")
    make_jobs(other, 50, seed=3)  # another cluster's jobs must not count
    return make_jobs(acme, 400)


def approx(value: float | None) -> object:
    return value if value is None else pytest.approx(value, rel=1e-9, abs=1e-9)


def test_numbers_match_an_independent_computation(acme, seeded):
    result = jobs_characterize(Window(acme))
    want = expected(seeded)

    assert result.total.jobs == want["jobs"] == 400
    assert result.total.gpu_jobs == want["gpu_jobs"]
    assert [t.job_type for t in result.types] == [t for t in TYPES if t in want["types"]]
    for t in result.types:
        w = want["types"][t.job_type]
        assert t.gpu_jobs == w["gpu_jobs"]
        for name in (
            "count_share",
            "gpu_time_share",
            "duration_median_s",
            "duration_mean_s",
            "queue_median_s",
            "queue_mean_s",
        ):
            assert getattr(t, name) == approx(w[name]), (t.job_type, name)
    assert sum(t.count_share for t in result.types) == pytest.approx(1.0)
    for s in result.states:
        assert s.count_share == approx(want["states"][s.group]["count_share"])
        assert s.gpu_time_share == approx(want["states"][s.group]["gpu_time_share"])
    assert result.total.gpus_mean == approx(want["gpus"]["mean"])
    assert result.total.gpus_median == approx(want["gpus"]["median"])
    assert result.total.gpus_max == want["gpus"]["max"]
    # Pretraining: few jobs, most of the GPU time (the paper's headline shape).
    pre = next(t for t in result.types if t.job_type == "pretrain")
    assert pre.gpu_time_share > 0.8 > 0.3 > pre.count_share

    for x, share in result.duration_cdf["all"]:
        k = int(x).bit_length() - 1
        assert share == approx(want["duration_below"][k]), x
    assert result.duration_cdf["all"][-1][1] == pytest.approx(1.0)
    assert dict(result.gpus_cdf["all"]) == {
        float(g): approx(v) for g, v in want["gpus_at_most"].items()
    }
    # The summary row speaks cluster_summary.csv's columns.
    assert set(result.summary) == set(reference.summary_columns())
    assert result.summary["gpu_job_num"] == want["gpu_jobs"]
    assert result.summary["fail_rate_gpu"] == pytest.approx(
        want["states"]["failed"]["count_share"], abs=5e-4
    )


def test_time_window_keeps_only_jobs_submitted_in_it(acme, seeded):
    since, until = T0 + timedelta(days=10), T0 + timedelta(days=20)
    inside = [j for j in seeded if since <= j.submit_at < until]
    result = jobs_characterize(Window(acme, since, until))
    assert 0 < result.total.jobs == len(inside) < len(seeded)
    assert result.total.gpu_jobs == expected(inside)["gpu_jobs"]
    assert jobs_characterize(Window(acme, since=until + timedelta(days=90))).total.jobs == 0


def test_empty_cluster_gives_zeros_not_errors(acme):
    result = jobs_characterize(Window(acme))
    assert result.total.jobs == 0 and result.types == [] and result.duration_cdf == {}
    assert all(s.count_share is None for s in result.states)


def test_telemetry_cdf_of_a_short_window_reads_raw_samples(db):
    now = datetime.now(UTC)
    node = seed_node("tele", "gpu-t-01", utils=[0, 0, 100, 100], intervals=1)
    result = telemetry_cdfs(node.cluster, now - timedelta(hours=1), now + timedelta(minutes=5))
    assert result.source == "raw samples" and result.rows == 4 and result.sampled_pct is None
    util = dict((p, v) for v, p in result.curves["gpu_util"])
    assert util[0.0] == 0 and util[1.0] == 100 and util[0.5] == pytest.approx(50)
    assert max(v for v, _ in result.curves["power_w"]) == 300


# --- Reference data ---------------------------------------------------------------------------

SHARED = Path(__file__).resolve().parents[3] / "shared" / "acmetrace"


def test_reference_data_loads_without_the_shared_folder():
    cdfs = reference.reference_cdfs()
    assert {c["cluster"] for c in cdfs["gpu_util"]} == {"Seren", "Kalos", "Philly", "PAI"}
    assert {c["cluster"] for c in cdfs["power_w"]} == {"Seren", "Kalos"}
    rows = {r["id"]: r for r in reference.reference_summary_rows()}
    assert list(rows) == ["Seren", "Kalos", "Philly", "Helios", "PAI"]
    assert rows["Seren"]["gpu_job_num"] == 663813


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/acmetrace beside the repository")
def test_reference_data_matches_the_shared_acmetrace_files():
    assert (
        reference.SUMMARY_CSV.read_bytes() == (SHARED / "data" / "cluster_summary.csv").read_bytes()
    )
    rebuilt = reference.reference_cdfs_build(SHARED / "derived" / "util_cdf_long.csv")
    assert reference.reference_cdfs_dump(rebuilt) == reference.CDFS_JSON.read_text()
    # The compacted curves keep the polarisation: 31.4 % of Seren samples at 0 % util.
    seren = next(c for c in rebuilt["gpu_util"] if c["cluster"] == "Seren")
    at_zero = max(p for v, p in seren["points"] if v == 0)
    assert at_zero == pytest.approx(31.4, abs=0.2)


# --- manage.py characterize ----------------------------------------------------------------------


def test_characterize_json(acme, seeded):
    out = io.StringIO()
    call_command("characterize", "--cluster", "acme", "--format", "json", stdout=out)
    data = json.loads(out.getvalue())
    want = expected(seeded)
    assert data["jobs"] == 400 and data["gpu_jobs"] == want["gpu_jobs"]
    assert data["types"]["eval"]["share_of_gpu_jobs"] == approx(
        want["types"]["eval"]["count_share"]
    )
    assert data["types"]["pretrain"]["duration_median_s"] == approx(
        want["types"]["pretrain"]["duration_median_s"]
    )
    assert data["states"]["failed"]["share_of_gpu_time"] == approx(
        want["states"]["failed"]["gpu_time_share"]
    )
    assert data["gpus_per_job"]["max"] == want["gpus"]["max"]


def test_characterize_counts_the_jobs_themselves_or_repairs_the_tallies(acme, seeded):
    """--from-jobs ignores the stored tallies; --rebuild-tallies counts them again first."""

    def summary(*args: str) -> dict:
        out = io.StringIO()
        call_command("characterize", "--cluster", "acme", *args, stdout=out)
        return {row[:3]: row[3] for row in summary_rows(json.loads(out.getvalue()))}

    stored = summary()
    # Floats to rounding: GPU time is summed in another order.
    same = {k: pytest.approx(v) if isinstance(v, float) else v for k, v in stored.items()}
    with connection.cursor() as cur:
        cur.execute("DELETE FROM jobs_jobtally")  # as if the tallies were lost
    assert summary()[("jobs", "all", "count")] == 0
    assert summary("--from-jobs") == same
    assert summary("--rebuild-tallies") == same
    assert summary() == same


def test_characterize_csv_with_a_window(acme, seeded):
    out = io.StringIO()
    call_command(
        "characterize",
        "--cluster=acme",
        "--since=2026-03-11",
        "--until=2026-03-21T00:00:00+00:00",
        "--format=csv",
        stdout=out,
    )
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == ["section", "key", "metric", "value"]
    values = {(r[0], r[1], r[2]): r[3] for r in rows[1:]}
    inside = [j for j in seeded if T0 + timedelta(days=10) <= j.submit_at < T0 + timedelta(days=20)]
    assert int(values[("jobs", "all", "count")]) == len(inside)
    assert values[("window", "since", "iso")] == "2026-03-11T00:00:00+00:00"
    assert ("type", "all", "queue_median_s") in values
    assert ("state", "cancelled", "share_of_gpu_jobs") in values
    assert ("gpus_per_job", "gpu", "median") in values


@pytest.mark.parametrize(
    "args, message",
    [
        (["--cluster", "nope"], "--cluster: unknown cluster 'nope' (known: acme)"),
        (["--cluster", "acme", "--since", "yesterday"], "--since: 'yesterday' is not an ISO"),
        (["--cluster", "acme", "--since", "2026-04-01", "--until", "2026-03-01"], "must be before"),
    ],
)
def test_characterize_errors_are_one_clear_line(acme, args, message):
    with pytest.raises(CommandError) as exc:
        call_command("characterize", *args)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_telemetry_cdf_of_a_long_window_block_samples_the_rollup(db, monkeypatch):
    """Above the row budget the partitioned rollup is read with TABLESAMPLE (bounded cost)."""
    from webapp.jobs import characterization

    monkeypatch.setattr(characterization, "TELEMETRY_ROW_BUDGET", 10)
    now = datetime.now(UTC)
    node = seed_node("tele", "gpu-t-02", utils=[100] * 8, intervals=3)
    result = telemetry_cdfs(node.cluster, now - timedelta(days=30), now + timedelta(minutes=5))
    assert result.source.startswith("1-minute rollup")
    assert 0 < result.sampled_pct < 100
    assert result.rows <= 16  # a sample of at most 2 minutes x 8 GPUs (possibly none)


def test_medians_equal_postgresql_percentile_cont(acme, seeded):
    """The medians come from counts of distinct values; they must be exactly what
    percentile_cont(0.5) says over the same jobs."""
    from django.db import connection

    result = jobs_characterize(Window(acme))
    with connection.cursor() as cur:
        cur.execute(
            "SELECT job_type, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY date_part('epoch', end_at - start_at)), "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY date_part('epoch', start_at - submit_at)), "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY gpus_requested) "
            "FROM jobs_job WHERE cluster_id = %s AND gpus_requested > 0 "
            "GROUP BY ROLLUP (job_type)",
            [acme.id],
        )
        want = {row[0] or "all": row[1:] for row in cur.fetchall()}
    for t in [*result.types, result.total]:
        assert (t.duration_median_s, t.queue_median_s, t.gpus_median) == want[t.job_type]


def test_warm_up_task_puts_every_cluster_page_in_the_cache(acme, seeded, django_assert_num_queries):
    from webapp.jobs.selectors import characterization_cached
    from webapp.jobs.tasks import warm_characterization

    assert warm_characterization() == {"clusters": 2, "tally_rows_merged": 0}
    # The page's read is then one query (the tally version, for the cache key), not the sum
    # of the cluster's tallies.
    with django_assert_num_queries(1):
        cached = characterization_cached(Window(acme))
    assert cached.total.jobs == 400
    assert cached.summary == jobs_characterize(Window(acme)).summary
