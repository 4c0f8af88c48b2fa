"""A cluster's monthly energy report for scripts:
`manage.py energy_report --cluster seren --month 2026-11 --format csv|json|pdf [--output F]`.

Also `--rebuild` first recomputes the month's hourly rollup from raw samples (a backfill, or
after allocations were corrected). A month with no data is an error (exit 1, one line)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.energy import report
from webapp.energy.selectors import NoEnergyData, month_bounds, month_report
from webapp.energy.services import energy_rollups_rebuild
from webapp.energy.trends import energy_trends
from webapp.fleet.models import Cluster


class Command(BaseCommand):
    help = "Print a cluster's monthly energy report as CSV or JSON, or write it as a PDF."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--month", required=True, help="YYYY-MM (UTC)")
        parser.add_argument("--format", choices=("csv", "json", "pdf"), default="csv")
        parser.add_argument("--output", help="file to write (default: stdout; required for pdf)")
        parser.add_argument(
            "--rebuild", action="store_true", help="recompute the month's rollup from raw samples"
        )

    def handle(self, *args: object, **opts: object) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {opts['cluster']!r}")
        month = str(opts["month"])
        try:
            lo, hi = month_bounds(month)
        except ValueError as exc:
            raise CommandError(f"--month: {exc}") from None
        fmt, output = opts["format"], opts["output"]
        if fmt == "pdf" and not output:
            raise CommandError("--format pdf needs --output FILE")
        if opts["rebuild"]:
            energy_rollups_rebuild(cluster.id, lo, hi)
        try:
            r, p = month_report(cluster, month)
            if fmt == "pdf":
                data = report.report_pdf(cluster, month)
        except NoEnergyData as exc:
            raise CommandError(str(exc)) from None
        except report.ReportError as exc:
            raise CommandError(f"PDF: {exc}") from None
        if fmt == "pdf":
            Path(output).write_bytes(data)
            self.stdout.write(f"{output}: {len(data)} bytes")
            return
        out = open(output, "w", newline="", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
        try:
            if fmt == "json":
                data = report.report_json(r, p, month, energy_trends(cluster, month))
                json.dump(data, out, indent=2, default=str)
                out.write("\n")
            else:
                writer = csv.writer(out)
                writer.writerow(report.CSV_HEADER)
                writer.writerows(report.report_rows(r, month))
        finally:
            if output:
                out.close()
