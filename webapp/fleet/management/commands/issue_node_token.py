"""Issue (or rotate) the token a node's collector authenticates with; grant the scheduler role."""

import argparse
import json
import re

from django.core.management.base import BaseCommand, CommandError

from collectors.schema import NAME_PATTERN
from webapp.fleet.services import node_scheduler_grant, node_token_issue


class Command(BaseCommand):
    help = "Create NODE in CLUSTER if needed and print a new token for its collector."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True)
        parser.add_argument("hostnames", nargs="+", metavar="HOSTNAME")
        parser.add_argument(
            "--json", action="store_true", help="print {hostname: token} as one JSON object"
        )
        parser.add_argument(
            "--scheduler",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="give the node the scheduler role: its token may send job events (the host "
            "running the Slurm watcher, or an integration such as scheduler-k8s); "
            "--no-scheduler takes it away; left out, the role stays as it was",
        )

    def handle(self, *args, **opts):
        pattern = re.compile(NAME_PATTERN)
        for name in [opts["cluster"], *opts["hostnames"]]:
            if not pattern.match(name):
                raise CommandError(f"{name!r} is not a valid name (letters, digits, . _ -)")
        tokens = {h: node_token_issue(opts["cluster"], h) for h in opts["hostnames"]}
        if opts["scheduler"] is not None:
            for host in opts["hostnames"]:
                node_scheduler_grant(opts["cluster"], host, opts["scheduler"])
        if opts["json"]:
            self.stdout.write(json.dumps(tokens))
        else:
            for host, token in tokens.items():
                self.stdout.write(f"{opts['cluster']}/{host} {token}")
