"""manage.py eval_request --cluster C --model PATH --datasets N|a,b,... --nodes K
--gpus-per-node G [--model-size-gb S] [--plan decoupled|baseline] [--plan-only] [--unless-any]:
request an evaluation as the page's form does (evaluation_request, the same checks).

--plan-only stores both plans without sending anything to the scheduler (a site with no Slurm,
such as the demo); --unless-any does nothing when the cluster already has a run (the demo asks
on every start). A refused request exits non-zero with the service's message, which names the
field ("nodes: ..." while the cluster's GPUs are not registered yet).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.evaluation.choices import PlanKind
from webapp.evaluation.estimates import default_suite
from webapp.evaluation.models import EvaluationRun
from webapp.evaluation.services import EvaluationError, evaluation_request


class Command(BaseCommand):
    help = "Request an evaluation of a checkpoint on a cluster (both plans predicted, one run)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--model", required=True, help="checkpoint under a model root")
        parser.add_argument(
            "--datasets",
            required=True,
            help="a number (the first N of the default suite) or comma-separated names",
        )
        parser.add_argument("--nodes", type=int, required=True)
        parser.add_argument("--gpus-per-node", type=int, required=True)
        parser.add_argument("--model-size-gb", type=float, default=None)
        parser.add_argument("--plan", choices=PlanKind.values, default=PlanKind.DECOUPLED)
        parser.add_argument("--plan-only", action="store_true", help="store, do not submit")
        parser.add_argument(
            "--unless-any", action="store_true", help="do nothing if the cluster has a run"
        )

    def handle(self, *args: object, **opts: object) -> None:
        cluster = str(opts["cluster"])
        if opts["unless_any"] and EvaluationRun.objects.filter(cluster__name=cluster).exists():
            self.stdout.write(f"cluster {cluster} has an evaluation run already")
            return
        spec = str(opts["datasets"])
        try:
            names = (
                [e.dataset for e in default_suite(int(spec))]
                if spec.isdigit()
                else [d for d in spec.split(",") if d.strip()]
            )
            run = evaluation_request(
                cluster_name=cluster,
                model_path=str(opts["model"]),
                datasets=names,
                nodes=int(opts["nodes"]),
                gpus_per_node=int(opts["gpus_per_node"]),
                plan=str(opts["plan"]),
                model_size_gb=opts["model_size_gb"],
                user="manage.py eval_request",
                submit=not opts["plan_only"],
            )
        except (EvaluationError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"run {run.pk}: {len(run.datasets)} datasets on {run.nodes} x {run.gpus_per_node} "
            f"GPUs of {cluster}, predicted speedup {run.prediction['speedup']:.2f}x, "
            f"{'planned only' if opts['plan_only'] else 'submitted'}"
        )
