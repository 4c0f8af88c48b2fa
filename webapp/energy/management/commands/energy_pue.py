"""Set a cluster's PUE from a date on (`manage.py energy_pue --cluster C --since D --value V`)."""

from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from webapp.energy.carbon_services import market_factor_set, pue_set
from webapp.energy.models import PueBasis
from webapp.fleet.models import Cluster


def _day(text: str, flag: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise CommandError(f"{flag} {text!r}: expected a date YYYY-MM-DD (UTC)") from None


class Command(BaseCommand):
    help = (
        "Record CLUSTER's PUE (or, with --market-kg-per-kwh, its contractual emission factor) "
        "over [--since, --until). Overlapping periods are refused; a period that starts inside "
        "the open-ended latest one closes it."
    )

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--since", required=True, help="first day, YYYY-MM-DD (UTC)")
        parser.add_argument("--until", help="first day no longer covered; left out: open-ended")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--value", type=float, help="PUE, 1.0 to 3.0")
        what.add_argument(
            "--market-kg-per-kwh",
            type=float,
            help="market-based factor (kg CO2e/kWh) from a contract or certificates",
        )
        parser.add_argument(
            "--source",
            required=True,
            help="for PUE: measured or assumed; for a market factor: the contract or certificate",
        )
        parser.add_argument(
            "--note", default="", help="who measured the PUE, and how (kept with the period)"
        )

    def handle(self, *args, **opts):
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"unknown cluster {opts['cluster']!r}")
        since = _day(opts["since"], "--since")
        until = _day(opts["until"], "--until") if opts["until"] else None
        try:
            if opts["value"] is not None:
                if opts["source"] not in PueBasis.values:
                    raise CommandError(
                        f"--source {opts['source']!r}: for a PUE, measured or assumed"
                    )
                text = opts["note"] or f"{opts['source']} (manage.py energy_pue)"
                done = pue_set(cluster, since, opts["value"], opts["source"], text, until)
                what = f"PUE {opts['value']} ({opts['source']})"
            else:
                done = market_factor_set(
                    cluster, since, opts["market_kg_per_kwh"], opts["source"], until
                )
                what = f"market factor {opts['market_kg_per_kwh']} kg/kWh"
        except ValidationError as e:
            raise CommandError("; ".join(e.messages)) from None
        if done.closed is not None:
            self.stdout.write(
                f"closed the previous period (since {done.closed.since:%Y-%m-%d}) "
                f"on {since:%Y-%m-%d}"
            )
        end = f"{until:%Y-%m-%d}" if until else "open-ended"
        self.stdout.write(f"{cluster.name}: {what} from {since:%Y-%m-%d}, {end}")
