"""Set how a cluster recovers: `manage.py recovery_mode --cluster seren --mode auto`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.fleet.models import Cluster
from webapp.recovery.choices import ExecutorKind, Mode
from webapp.recovery.services import RecoveryError, recovery_policy_set


class Command(BaseCommand):
    help = "Set a cluster's recovery mode (auto, approve, dry_run) and executor."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--mode", required=True, choices=Mode.values)
        parser.add_argument("--executor", choices=ExecutorKind.values)

    def handle(self, *args: object, **opts: object) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {opts['cluster']!r} (nodes create it on first contact)")
        try:
            found = recovery_policy_set(
                cluster.pk, mode=opts["mode"], executor=opts["executor"], user="manage.py"
            )
        except RecoveryError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{cluster.name}: recovery {found.mode} via {found.executor}")
