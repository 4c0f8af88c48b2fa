"""Import an hourly grid-intensity CSV (Electricity Maps export first): `manage.py grid_import`."""

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from webapp.energy.carbon import known_zones
from webapp.energy.carbon_services import intensity_series_store
from webapp.energy.intensity_csv import IntensityCsvError, parse_intensity_csv


class Command(BaseCommand):
    help = (
        "Import FILE, an hourly carbon-intensity series of one grid zone, in one transaction: "
        "any bad line refuses the whole file. Re-importing a file of the same name replaces it."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--zone", help="the zone to take from a file that holds several")
        parser.add_argument(
            "--basis",
            choices=("lca", "direct"),
            default="lca",
            help="life-cycle (default, as the yearly table) or direct-combustion column",
        )
        parser.add_argument("--name", help="dataset name (default: the file's name)")

    def handle(self, *args, **opts):
        path: Path = opts["file"]
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:
                series = parse_intensity_csv(f, opts["zone"], opts["basis"])
        except OSError as e:
            raise CommandError(f"{path}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text") from None
        except IntensityCsvError as e:
            raise CommandError(f"{path.name}: {e}") from None
        try:
            ds = intensity_series_store(series, opts["name"] or path.name, known_zones())
        except ValidationError as e:
            raise CommandError(f"{path.name}: {'; '.join(e.messages)}") from None
        self.stdout.write(
            f"{ds.name}: {ds.hours} hours of zone {ds.zone} ({ds.basis}), "
            f"{ds.first_hour:%Y-%m-%d %H:00} to {ds.last_hour:%Y-%m-%d %H:00} UTC"
        )
