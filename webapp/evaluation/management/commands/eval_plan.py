"""manage.py eval_plan --datasets N|FILE --nodes K --gpus-per-node G [--model-size-gb S]
[--json]: both evaluation plans and the decoupled plan's predicted speedup.

Offline (manage.py sets VIGIL_OFFLINE for it): the estimates are the default table's (the
first N datasets of the 63-dataset suite) or the FILE's; the page uses learned ones.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.evaluation.estimates import default_suite, estimates_parse
from webapp.evaluation.planner import Hardware, PlanError, plans_compare


class Command(BaseCommand):
    help = "Plan an evaluation both ways (coupled baseline, decoupled) and predict the speedup."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--datasets",
            required=True,
            help="a number (the first N of the default suite) or a file (names, or CSV)",
        )
        parser.add_argument("--nodes", type=int, required=True)
        parser.add_argument("--gpus-per-node", type=int, required=True)
        parser.add_argument("--model-size-gb", type=float, default=None)
        parser.add_argument("--json", action="store_true", help="print JSON (both plans)")

    def handle(self, *args: object, **opts: object) -> None:
        spec = str(opts["datasets"])
        try:
            if spec.isdigit():
                estimates = default_suite(int(spec))
            else:
                try:
                    text = Path(spec).read_text(encoding="utf-8")
                except OSError as exc:
                    raise ValueError(f"datasets: cannot read {spec}: {exc.strerror}") from None
                estimates = estimates_parse(text)
            hardware = Hardware(
                int(opts["nodes"]), int(opts["gpus_per_node"]), opts["model_size_gb"]
            )
            result = plans_compare(estimates, hardware)
        except (ValueError, PlanError) as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(json.dumps(result))
            return
        for kind in ("baseline", "decoupled"):
            p = result[kind]
            share = ", ".join(f"{k} {v:.1%}" for k, v in p["gpu_share"].items())
            self.stdout.write(
                f"{kind:9}  makespan {p['makespan_s']:9.1f} s  {p['jobs']:4d} jobs  GPU time: {share}"
            )
        self.stdout.write(f"speedup    {result['speedup']:.2f}x")
