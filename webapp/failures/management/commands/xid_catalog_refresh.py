"""manage.py xid_catalog_refresh SHEET [--date YYYY-MM-DD]: rewrite the Xid catalog file from
NVIDIA's downloadable sheet (docs/xid-catalog.md section 4). Files only: no database or broker.

The sheet is read and checked in full before anything is written; on a problem the command
exits non-zero with one line naming it, and the catalog file is left as it was.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.failures import xid_catalog


class Command(BaseCommand):
    help = "Rewrite the Xid catalog file from NVIDIA's Xid catalog sheet (.xlsx or .csv)."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("sheet", help="NVIDIA's Xid-Catalog.xlsx, or its Xids sheet as .csv")
        parser.add_argument(
            "--date",
            help="the catalog's date, YYYY-MM-DD (default: today)",
        )
        parser.add_argument(
            "--catalog",
            default=str(xid_catalog.CATALOG_PATH),
            help="the catalog file to write (default: the one Vigil reads)",
        )
        parser.add_argument(
            "--source",
            default=str(xid_catalog.SOURCE_PATH),
            help="its source note (default: beside the catalog Vigil reads)",
        )

    def handle(self, *args, **options) -> None:
        try:
            when = date.fromisoformat(options["date"]) if options["date"] else date.today()
        except ValueError as e:
            raise CommandError(f"--date {options['date']!r}: expected YYYY-MM-DD") from e
        sheet = Path(options["sheet"])
        if not sheet.is_file():
            raise CommandError(f"{sheet}: no such file")
        catalog = Path(options["catalog"])
        try:
            entries = xid_catalog.sheet_read(sheet)
            try:
                before = xid_catalog.catalog_load(catalog)
            except xid_catalog.XidCatalogError:
                before = {}
            xid_catalog.catalog_write(
                entries,
                catalog,
                Path(options["source"]),
                catalog_date=when,
                sheet=sheet.name,
            )
        except xid_catalog.XidCatalogError as e:
            raise CommandError(str(e)) from e
        after = {e.code: e for e in entries}
        added = sorted(after.keys() - before.keys())
        removed = sorted(before.keys() - after.keys())
        changed = sorted(c for c in after.keys() & before.keys() if after[c] != before[c])
        self.stdout.write(
            f"{catalog}: {len(entries)} Xids in use (catalog of {when.isoformat()}); "
            f"added {_codes(added)}, removed {_codes(removed)}, changed {_codes(changed)}"
        )


def _codes(codes: list[int]) -> str:
    return ", ".join(map(str, codes)) if codes else "none"
