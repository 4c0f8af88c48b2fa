"""Create the day partitions of the sample tables ahead of time and drop expired ones (what the
hourly beat task does), e.g. right after `migrate` on a new database."""

from django.core.management.base import BaseCommand

from webapp.telemetry.partitions import partitions_maintain


class Command(BaseCommand):
    help = "Create sample-table partitions for the days ahead; drop those past retention."

    def handle(self, *args, **opts):
        for table, changes in partitions_maintain().items():
            created, dropped = len(changes["created"]), len(changes["dropped"])
            self.stdout.write(f"{table}: {created} created, {dropped} dropped")
