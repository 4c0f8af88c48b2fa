"""`manage.py characterize --cluster NAME [--since ISO] [--until ISO] [--format json|csv]
[--from-jobs] [--rebuild-tallies]`: the workload summary of one cluster and window, as the
characterization page computes it."""

from __future__ import annotations

import csv
import json

from django.core.management.base import BaseCommand, CommandError

from webapp.core.windows import window_parse
from webapp.fleet.models import Cluster
from webapp.jobs.characterization import Characterization, jobs_characterize
from webapp.jobs.services import job_tallies_rebuild


def summary_dict(result: Characterization) -> dict:
    """Counts, type shares, per-type duration / queueing, state shares and GPUs per job."""
    w = result.window
    t = result.total
    return {
        "cluster": w.cluster.name,
        "since": w.since.isoformat() if w.since else None,
        "until": w.until.isoformat() if w.until else None,
        "jobs": t.jobs,
        "gpu_jobs": t.gpu_jobs,
        "gpu_time_s": t.gpu_time_s,
        "types": {
            s.job_type: {
                "gpu_jobs": s.gpu_jobs,
                "share_of_gpu_jobs": s.count_share,
                "share_of_gpu_time": s.gpu_time_share,
                "duration_median_s": s.duration_median_s,
                "duration_mean_s": s.duration_mean_s,
                "queue_median_s": s.queue_median_s,
                "queue_mean_s": s.queue_mean_s,
            }
            for s in [*result.types, t]
        },
        "states": {
            s.group: {
                "gpu_jobs": s.gpu_jobs,
                "share_of_gpu_jobs": s.count_share,
                "share_of_gpu_time": s.gpu_time_share,
            }
            for s in result.states
        },
        "gpus_per_job": {"mean": t.gpus_mean, "median": t.gpus_median, "max": t.gpus_max},
    }


def summary_rows(summary: dict) -> list[tuple[str, str, str, object]]:
    """The summary as (section, key, metric, value) rows, for CSV."""
    rows: list[tuple[str, str, str, object]] = [
        ("window", "cluster", "name", summary["cluster"]),
        ("window", "since", "iso", summary["since"]),
        ("window", "until", "iso", summary["until"]),
        ("jobs", "all", "count", summary["jobs"]),
        ("jobs", "gpu", "count", summary["gpu_jobs"]),
        ("jobs", "gpu", "gpu_time_s", summary["gpu_time_s"]),
    ]
    for section in ("types", "states"):
        for key, metrics in summary[section].items():
            rows.extend((section[:-1], key, m, v) for m, v in metrics.items())
    rows.extend(("gpus_per_job", "gpu", m, v) for m, v in summary["gpus_per_job"].items())
    return rows


class Command(BaseCommand):
    help = "Print the workload characterization summary of one cluster and time window."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--since", help="jobs submitted at or after (ISO 8601, UTC if naive)")
        parser.add_argument("--until", help="jobs submitted before (ISO 8601, UTC if naive)")
        parser.add_argument("--format", choices=("json", "csv"), default="json")
        parser.add_argument(
            "--from-jobs",
            action="store_true",
            help="count the jobs themselves, not the cluster's tallies (a check; slower)",
        )
        parser.add_argument(
            "--rebuild-tallies",
            action="store_true",
            help="first count the cluster's tallies again from its jobs (a repair)",
        )

    def handle(self, *args, **opts) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
            raise CommandError(
                f"--cluster: unknown cluster {opts['cluster']!r} (known: {known or 'none'})"
            )
        try:
            window = window_parse(cluster, opts["since"], opts["until"])
        except ValueError as exc:
            raise CommandError(f"--{exc}") from None
        if opts["rebuild_tallies"]:
            job_tallies_rebuild(cluster.id)
        summary = summary_dict(jobs_characterize(window, from_jobs=opts["from_jobs"]))
        if opts["format"] == "json":
            self.stdout.write(json.dumps(summary, indent=2))
            return
        writer = csv.writer(self.stdout, lineterminator="\n")
        writer.writerow(["section", "key", "metric", "value"])
        writer.writerows(("" if v is None else v for v in row) for row in summary_rows(summary))
