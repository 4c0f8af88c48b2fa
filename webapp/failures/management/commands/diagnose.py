"""manage.py diagnose LOGFILE [--kernel-log FILE] [--json]: offline, no database or broker.

manage.py sets VIGIL_OFFLINE for this command, so settings start no embedded servers; the
command itself only reads files (webapp/failures/cli.py does the work).
"""

from django.core.management.base import BaseCommand, CommandError

from webapp.failures import cli


class Command(BaseCommand):
    help = "Diagnose a failed job's log file offline (rules only, no database)."
    # System checks may touch the database (and need nothing here): skip them.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args, **options) -> None:
        status = cli.run(options, self.stdout, self.stderr)
        if status:
            raise CommandError("diagnosis failed (see the message above)", returncode=status)
