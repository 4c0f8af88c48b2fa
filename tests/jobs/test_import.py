"""The trace import (webapp/jobs/trace_import.py) through manage.py import_acmetrace: a
generated trace with the exact AcmeTrace schema, bad rows, the README's example rows, and
idempotence; and the service called directly, as the command and the bench call it."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count, Max

from tests.jobs.helpers import assert_tallies_match_jobs
from webapp.core.windows import Window
from webapp.fleet.models import Cluster
from webapp.jobs import trace_import
from webapp.jobs.acmetrace import COMMON_COLUMNS, KALOS_HEADER
from webapp.jobs.characterization import jobs_characterize
from webapp.jobs.models import Job, JobTally
from webapp.jobs.trace_synthesize import synthesize

# AcmeTrace final states -> the paper's groups (preempted counts as cancelled; running is none).
GROUP = {
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
}

SEREN_HEADER = ",".join(COMMON_COLUMNS)
# The example rows of the AcmeTrace README (https://github.com/InternLM/AcmeTrace).
SEREN_EXAMPLE = (
    "5778469,u5907,1,8,128,Other,COMPLETED,2023-03-01 00:23:58+08:00,"
    "2023-03-01 00:24:11+08:00,2023-03-01 01:09:04+08:00,2693,13,21544.0"
)
KALOS_EXAMPLE = (
    "dlctk696s0jbvitv,uf794,8,64,960,1000,100.0,Other,FAILED,2023-05-17 11:00:58+00:00,"
    "2023-05-17 11:01:08+00:00,2023-05-17 11:01:16+00:00,2023-05-17 11:01:16+00:00,,18,10.0,"
    "1152.0"
)


def run(path: Path, cluster: str = "seren", *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_acmetrace", "--cluster", cluster, str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write(tmp_path: Path, *lines: str, header: str = SEREN_HEADER) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


@pytest.fixture(scope="session")
def trace_200k(tmp_path_factory) -> Path:
    return synthesize(tmp_path_factory.mktemp("acme") / "trace_seren.csv", 200_000, seed=3)


def test_generated_200k_trace_imports_once(db, trace_200k):
    out, err = run(trace_200k)

    # The progress bar (bytes) on stderr, redrawn in place (one line), the summary on stdout.
    assert "import trace_seren.csv" in err and "100%" in err
    assert err.count("\n") == 1 and err.count("\r") > 1
    assert "read 200,000 rows" in out
    assert "imported 200,000, already present 0, skipped 0" in out
    seren = Cluster.objects.get(name="seren")
    jobs = Job.objects.filter(cluster=seren)
    assert jobs.count() == 200_000
    assert not jobs.exclude(source="acmetrace").exists()
    assert not jobs.filter(allocations__isnull=False).exists()

    # A row reads back as the file says (times with +08:00 stored in UTC).
    with trace_200k.open() as f:
        row = dict(zip(COMMON_COLUMNS, list(csv.reader(f))[1234], strict=True))
    job = jobs.get(scheduler_id=row["job_id"])
    assert job.submit_at == datetime.fromisoformat(row["submit_time"])
    assert job.end_at.astimezone(UTC) == datetime.fromisoformat(row["end_time"])
    assert (job.user, job.gpus_requested, job.nodes_requested, job.cpus_requested) == (
        row["user"], int(row["gpu_num"]), int(row["node_num"]), int(row["cpu_num"])
    )  # fmt: skip
    assert job.job_type == row["type"].lower() and job.state == row["state"].lower()
    assert job.duration_s == float(row["duration"]) and job.queue_s == float(row["queue"])

    # The paper's mix: evaluation is the most common GPU job type.
    by_type = dict(
        jobs.filter(gpus_requested__gt=0).values_list("job_type").annotate(n=Count("id"))
    )
    assert max(by_type, key=by_type.get) == "eval"

    # The characterization agrees with pandas reading the same file (the paper's notebook used
    # pandas), from the tallies the import stored and counting the jobs themselves alike.
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(trace_200k)
    assert dict(jobs.values_list("state").annotate(n=Count("id"))) == {
        state.lower(): n for state, n in frame["state"].value_counts().items()
    }
    result = jobs_characterize(Window(seren))
    assert result.total.gpu_time_s == frame["gpu_time"].sum()
    gpu = frame[frame["gpu_num"] > 0]
    for t in result.types:
        mine = gpu[gpu["type"].str.lower() == t.job_type]
        assert t.gpu_jobs == len(mine)
        assert t.count_share == pytest.approx(len(mine) / len(gpu), rel=1e-12)
        assert t.gpu_time_share == pytest.approx(mine["gpu_time"].sum() / gpu["gpu_time"].sum())
        assert t.duration_median_s == mine["duration"].median()
    assert result.total.duration_median_s == gpu["duration"].median()
    groups = gpu["state"].map(lambda s: GROUP.get(s)).dropna()
    for s in result.states:
        assert s.count_share == pytest.approx((groups == s.group).mean(), rel=1e-12)
    assert_tallies_match_jobs(seren)

    stamp = jobs.aggregate(Max("updated_at"))["updated_at__max"]
    out, _ = run(trace_200k)
    assert "imported 0, already present 200,000, skipped 0" in out
    assert jobs.count() == 200_000
    assert jobs.aggregate(Max("updated_at"))["updated_at__max"] == stamp
    assert jobs_characterize(Window(seren)) == result  # the tallies did not change either


def test_bad_rows_are_reported_by_line_and_skipped(db, tmp_path):
    good = SEREN_EXAMPLE
    path = write(
        tmp_path,
        good,
        good.replace("5778469", "2").replace(",Other,", ",Training,"),
        good.replace("5778469", "3").replace("01:09:04", "00:20:00"),
        good.replace("5778469", "4").replace(",1,8,128,", ",1,-8,128,"),
        good.replace("5778469", "5").replace("00:24:11+08:00", "00:24:11+25:00"),
        good.replace("5778469", "6").replace("00:23:58+08:00", "00:23:58"),
        "",  # a blank line is not a row
        good.replace("5778469", "7").replace(",COMPLETED,", ",EXPLODED,"),
        good.replace("5778469", "8") + ",extra",
        good.replace("5778469", "9").replace(",1,8,128,", ",1,eight,128,"),
        good.replace("5778469", "10").replace("2023-03-01 00:24:11", "2023-02-30 00:24:11"),
        good.replace("5778469", "11"),
    )
    out, _ = run(path)

    assert "line 3: type: unknown type 'Training'" in out
    assert (
        "line 4: end before start: end_time 2023-03-01 00:20:00+08:00 is before start_time" in out
    )
    assert "line 5: gpu_num: negative (-8)" in out
    assert "line 6: start_time: bad time zone in '2023-03-01 00:24:11+25:00'" in out
    assert "line 7: submit_time: bad time zone in '2023-03-01 00:23:58'" in out
    assert "line 9: state: unknown state 'EXPLODED'" in out
    assert "line 10: expected 13 columns, found 14" in out
    assert "line 11: gpu_num: not an integer: 'eight'" in out
    assert "line 12: start_time: not an ISO time: '2023-02-30 00:24:11+08:00'" in out
    assert "read 11 rows" in out and "imported 2, already present 0, skipped 9" in out
    assert "bad_time_zone 2" in out
    assert sorted(Job.objects.values_list("scheduler_id", flat=True)) == ["11", "5778469"]


def test_readme_example_rows_read_back_exactly(db, tmp_path):
    run(write(tmp_path, SEREN_EXAMPLE), "seren")
    job = Job.objects.get(cluster__name="seren", scheduler_id="5778469")
    assert job.submit_at == datetime(2023, 2, 28, 16, 23, 58, tzinfo=UTC)
    assert (job.duration_s, job.queue_s, job.gpu_time_s) == (2693, 13, 21544)
    assert (job.job_type, job.state, job.user) == ("other", "completed", "u5907")

    run(write(tmp_path, KALOS_EXAMPLE, header=",".join(KALOS_HEADER)), "kalos")
    job = Job.objects.get(cluster__name="kalos", scheduler_id="dlctk696s0jbvitv")
    assert (job.state, job.gpus_requested, job.nodes_requested, job.cpus_requested) == (
        "failed", 64, 8, 960
    )  # fmt: skip
    assert job.queue_s == 10 and job.end_at == datetime(2023, 5, 17, 11, 1, 16, tzinfo=UTC)


def test_generated_kalos_trace_imports(db, tmp_path):
    path = synthesize(tmp_path / "trace_kalos.csv", 3000, seed=5, cluster_flavour="kalos")
    out, _ = run(path, "kalos", "--batch-size", "700")
    assert "imported 3,000, already present 0, skipped 0" in out
    assert Job.objects.filter(cluster__name="kalos", scheduler_id__startswith="dlc").count() == 3000
    assert_tallies_match_jobs(Cluster.objects.get(name="kalos"))  # RUNNING jobs: no end


def test_duplicate_job_ids_in_one_file_are_stored_once(db, tmp_path):
    path = write(tmp_path, SEREN_EXAMPLE, SEREN_EXAMPLE, SEREN_EXAMPLE.replace("5778469", "1"))
    out, _ = run(path, "seren", "--batch-size", "1")
    assert "imported 2, already present 1, skipped 0" in out
    # The same again in one chunk.
    out, _ = run(path, "other")
    assert "imported 2, already present 1, skipped 0" in out
    assert_tallies_match_jobs(Cluster.objects.get(name="other"))


def test_a_trace_split_over_two_files_and_overlapping_imports_once(db, tmp_path):
    """A cluster that already has some of the file's jobs (an interrupted import, a second
    file overlapping the first): the rows already there are left alone, the rest stored."""
    path = synthesize(tmp_path / "trace_seren.csv", 5000, seed=9)
    lines = path.read_text().splitlines()
    first = tmp_path / "first.csv"
    first.write_text("\n".join([lines[0], *lines[1:1500], *lines[3000:3500]]) + "\n")
    out, _ = run(first)
    assert "imported 1,999, already present 0" in out
    out, _ = run(path)
    assert "imported 3,001, already present 1,999, skipped 0" in out
    seren = Cluster.objects.get(name="seren")
    assert Job.objects.filter(cluster=seren).count() == 5000
    assert_tallies_match_jobs(seren)


@pytest.mark.django_db(transaction=True)
def test_parallel_writers_store_each_job_once(tmp_path, monkeypatch):
    """Outside a transaction several writers COPY at once, each in its own connection. Job ids
    repeated across their blocks (a writer then waits for another's, or they deadlock and one
    gives way) are stored once, and the tallies say what the jobs say."""
    monkeypatch.setattr(trace_import, "BLOCK_BYTES", 3000)  # many blocks of ~25 rows
    path = synthesize(tmp_path / "trace_seren.csv", 1200, seed=4)
    header, *rows = path.read_text().splitlines()
    # Every seventh row again 30 rows later, every tenth 300 rows later: repeats land in the
    # next block (another writer's, not committed yet) or in a much later one.
    mixed = []
    for i, row in enumerate(rows):
        mixed.append(row)
        mixed.extend(
            rows[i - lag] for lag, every in ((30, 7), (300, 10)) if i >= lag and not i % every
        )
    path.write_text("\n".join([header, *mixed]) + "\n")
    out, _ = run(path, "seren", "--writers", "3", "--batch-size", "200", "--no-progress")
    assert f"read {len(mixed):,} rows" in out
    assert f"imported 1,200, already present {len(mixed) - 1200:,}, skipped 0" in out
    seren = Cluster.objects.get(name="seren")
    assert Job.objects.filter(cluster=seren).count() == 1200
    assert_tallies_match_jobs(seren)
    out, _ = run(path, "seren", "--writers", "2", "--no-progress")
    assert f"imported 0, already present {len(mixed):,}" in out
    assert_tallies_match_jobs(seren)


def test_a_database_error_stops_the_import_in_one_line_and_keeps_nothing_of_it(
    db, tmp_path, monkeypatch
):
    monkeypatch.setattr(trace_import, "BLOCK_BYTES", 3000)
    encode, calls = trace_import._copy_data, []

    def broken_third_block(*args):
        calls.append(1)
        data = encode(*args)
        return data[:1] + [b"\x00\x07garbage"] if len(calls) == 3 else data

    monkeypatch.setattr(trace_import, "_copy_data", broken_third_block)
    path = synthesize(tmp_path / "trace_seren.csv", 200, seed=2)
    with pytest.raises(CommandError) as excinfo:
        run(path)
    assert str(excinfo.value).startswith("storing the jobs failed: ")
    assert "\n" not in str(excinfo.value)
    assert not Job.objects.exists()  # one transaction (--batch-size): rolled back whole
    assert not JobTally.objects.exists()
    monkeypatch.setattr(trace_import, "_copy_data", encode)
    out, _ = run(path)  # the caller's transaction is still usable
    assert "imported 200," in out


def test_long_list_of_bad_rows_is_capped_but_all_counted(db, tmp_path):
    bad = [SEREN_EXAMPLE.replace("5778469", str(i)).replace(",Other,", ",X,") for i in range(30)]
    out, _ = run(write(tmp_path, *bad))
    assert out.count("type: unknown type 'X'") == 20
    assert "... and 10 more skipped rows" in out
    assert "skipped 30" in out and "unknown_type 30" in out


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("job_id,user,gpu_num\n1,u1,8\n", "missing column(s) node_num, cpu_num, type, state"),
        ("", "the file is empty"),
    ],
)
def test_not_an_acmetrace_file_is_one_error_and_writes_nothing(db, tmp_path, content, problem):
    path = tmp_path / "other.csv"
    path.write_text(content)
    with pytest.raises(CommandError) as excinfo:
        run(path, "newcluster")
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: not an AcmeTrace job trace: {problem}")
    assert not Cluster.objects.filter(name="newcluster").exists()
    assert not Job.objects.exists()


def test_missing_file_and_bad_cluster_name(db, tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        run(tmp_path / "absent.csv")
    with pytest.raises(CommandError, match="--cluster: 'bad name!'"):
        run(write(tmp_path, SEREN_EXAMPLE), "bad name!")


def test_quoted_fields_and_float_counts_take_the_per_row_path(db, tmp_path):
    """A file written by another tool: quoted fields, counts as "8.0". The vectorised parser
    leaves such rows to the per-row one, which accepts them with the same values."""
    quoted = SEREN_EXAMPLE.replace("5778469,u5907,1,8,128,", '"5778470","u5907",1.0,8.0,128,')
    # And one with fractional seconds ending days later (another tool's rounding).
    fractional = SEREN_EXAMPLE.replace("5778469", "5778471").replace(
        "2023-03-01 01:09:04+08:00", "2023-03-04 01:09:04.250001+08:00"
    )
    out, _ = run(
        write(tmp_path, SEREN_EXAMPLE, quoted, quoted.replace("Other", "Nope"), fractional)
    )
    assert "line 4: type: unknown type 'Nope'" in out
    assert "imported 3, already present 0, skipped 1" in out
    assert_tallies_match_jobs(Cluster.objects.get(name="seren"))
    a, b = Job.objects.filter(scheduler_id__in=["5778469", "5778470"]).order_by("scheduler_id")
    assert (b.gpus_requested, b.nodes_requested, b.submit_at) == (8, 1, a.submit_at)
    assert b.gpu_time_s == a.gpu_time_s == 21544


def test_the_service_reports_and_shows_progress_through_its_callback(db, tmp_path, monkeypatch):
    """trace_import itself, as the bench calls it: the counts in its report, and progress in
    bytes through the callback it is given, up to the whole file."""
    monkeypatch.setattr(trace_import, "BLOCK_BYTES", 3000)
    more = [SEREN_EXAMPLE.replace("5778469", str(i)) for i in range(200)]  # many blocks
    path = write(tmp_path, SEREN_EXAMPLE, SEREN_EXAMPLE.replace(",Other,", ",X,"), *more)
    seen: list[tuple[int, int]] = []
    report = trace_import.trace_import(path, "seren", progress=lambda *p: seen.append(p))
    assert (report.read, report.imported, report.present) == (202, 201, 0)
    assert report.skipped == {"unknown_type": 1}
    assert [e.split(" (")[0] for e in report.errors] == ["line 3: type: unknown type 'X'"]
    assert report.lines()[-1] == "skipped by reason: unknown_type 1"
    size = path.stat().st_size
    assert len(seen) > 3 and {s for _, s in seen} == {size}
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == size
    assert Job.objects.filter(cluster__name="seren").count() == 201


def test_the_service_refuses_in_one_line(db, tmp_path):
    with pytest.raises(trace_import.TraceImportError, match=r"cluster: 'a b' is not a valid"):
        trace_import.trace_import(write(tmp_path, SEREN_EXAMPLE), "a b")
    with pytest.raises(trace_import.TraceImportError, match="absent.csv: no such file"):
        trace_import.trace_import(tmp_path / "absent.csv", "seren")
    with pytest.raises(CommandError, match="--writers: must be at least 1"):
        run(write(tmp_path, SEREN_EXAMPLE), "seren", "--writers", "0")
    assert not Job.objects.exists()
