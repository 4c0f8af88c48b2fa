"""AcmeTrace import rate against pandas.read_csv of the same file, in one run.

    .venv/bin/python bench/import.py [--rows 1000000] [--flavour seren] [--batch-size 100000]

Starts its own embedded PostgreSQL in a temporary folder, migrates, writes a trace with the
AcmeTrace schema and the paper's workload mix (`webapp.jobs.trace_synthesize.synthesize`), then
times:
  1. `manage.py import_acmetrace` end to end (`webapp.jobs.trace_import`: parse, validate,
     COPY by the parallel writers, the jobs' tallies, ANALYZE);
  2. the same import again (every row already present: the idempotent path);
  3. `pandas.read_csv` of the same file with the time columns parsed (the baseline: parsing
     alone, nothing validated or stored);
  4. the characterization of the imported jobs: `jobs_characterize` with nothing cached
     (characterization_cold_s: the cluster's tallies), and the characterization page through
     Django's test client, the first request of the process with an empty cache (page_cold_s)
     and again (page_warm_s, from the cache). Goals: 100,000 rows/s, a page under
     1 s cold.
Last line: JSON with rows_per_s, pandas_rows_per_s, rows, seconds and those timings.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site  # noqa: E402 (after the path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--flavour", default="seren", choices=["seren", "kalos"])
    parser.add_argument("--batch-size", type=int, default=100_000)
    args = parser.parse_args()

    # The page timings use Django's test client, as a developer's run does.
    with bench_site("vigil-bench-import-", debug=True, unset=("VIGIL_CACHE_URL",)) as tmp:
        from django.core.management import call_command

        from webapp.jobs.models import Job
        from webapp.jobs.trace_import import WRITERS
        from webapp.jobs.trace_synthesize import synthesize

        trace = Path(tmp) / f"trace_{args.flavour}.csv"
        t0 = time.perf_counter()
        synthesize(trace, args.rows, seed=1, cluster_flavour=args.flavour)
        print(
            f"synthesized {args.rows:,} rows ({trace.stat().st_size / 1e6:.0f} MB) in "
            f"{time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )

        def run_import() -> tuple[float, str]:
            out = io.StringIO()
            start = time.perf_counter()
            call_command(
                "import_acmetrace",
                "--cluster",
                args.flavour,
                str(trace),
                "--batch-size",
                str(args.batch_size),
                stdout=out,
                stderr=sys.stderr,
            )
            return time.perf_counter() - start, out.getvalue().strip().splitlines()[-1]

        import_s, summary = run_import()
        print(summary, file=sys.stderr)
        stored = Job.objects.count()
        again_s, summary_again = run_import()
        print(summary_again, file=sys.stderr)
        if Job.objects.count() != stored:
            raise SystemExit("the second import changed the number of jobs")

        pandas_s = _pandas(trace)
        result = {
            "rows_per_s": round(args.rows / import_s),
            "pandas_rows_per_s": round(args.rows / pandas_s),
            "ratio": round(pandas_s / import_s, 3),
            "rows": args.rows,
            "stored": stored,
            "seconds": round(import_s, 2),
            "pandas_seconds": round(pandas_s, 2),
            "reimport_rows_per_s": round(args.rows / again_s),
            "flavour": args.flavour,
            "writers": WRITERS,
            "cpus": os.cpu_count(),
        }
        result.update(_characterization(args.flavour))
        print(json.dumps(result))


def _pandas(trace: Path) -> float:
    """Seconds for pandas.read_csv with the three time columns parsed to UTC (the same work
    of reading the file and turning times into instants, with nothing validated or stored)."""
    import pandas

    start = time.perf_counter()
    frame = pandas.read_csv(trace)
    for column in ("submit_time", "start_time", "end_time"):
        frame[column] = pandas.to_datetime(frame[column], utc=True, format="ISO8601")
    seconds = time.perf_counter() - start
    del frame
    return seconds


def _characterization(cluster: str) -> dict:
    """Seconds for the characterization of the imported jobs: computed (no cache), then the
    page, cold (empty cache) and warm. The page's goal: under 1 s."""
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.test import Client
    from django.test.utils import setup_test_environment

    from webapp.core.windows import Window
    from webapp.fleet.models import Cluster
    from webapp.jobs.characterization import jobs_characterize

    window = Window(Cluster.objects.get(name=cluster))
    start = time.perf_counter()
    jobs_characterize(window)
    out = {"characterization_cold_s": round(time.perf_counter() - start, 2)}

    setup_test_environment()  # the test client's host, "testserver", is then allowed
    client = Client()
    client.force_login(get_user_model().objects.create_user("bench"))
    cache.clear()  # this run's own Redis (a temporary VIGIL_DATA_DIR)
    for key in ("page_cold_s", "page_warm_s"):
        start = time.perf_counter()
        response = client.get(f"/jobs/characterization/?cluster={cluster}")
        out[key] = round(time.perf_counter() - start, 2)
        if response.status_code != 200:
            raise SystemExit(f"the characterization page answered {response.status_code}")
    return out


if __name__ == "__main__":
    main()
