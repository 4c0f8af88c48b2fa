"""The evaluation page: request an evaluation (operators), see one run's two plans as Gantt
charts side by side, predicted against measured makespan, GPU time by phase, and the history
of runs; CSV exports of every table (api_urls.py).

Everyone logged in reads (evaluation runs are cluster metadata, like jobs); only operators
submit, since a request runs jobs on the cluster. A refused request stores nothing: the page
is shown again with the message naming the field (400), or a JSON error for a JSON client.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.evaluation import figures, tables
from webapp.evaluation.choices import PlanKind
from webapp.evaluation.estimates import DEFAULT_SUITE
from webapp.evaluation.forms import PageForm, PhasesForm, RequestForm
from webapp.evaluation.models import EvaluationRun, RuntimeEstimate
from webapp.evaluation.phases import EVAL_PHASES, eval_phases
from webapp.evaluation.selectors import cluster_capacity, run_jobs, runs_recent
from webapp.evaluation.services import EvaluationError, evaluation_request
from webapp.teams.selectors import user_is_operator

OPERATORS_ONLY = "Only operators may request evaluations: ask one, or join the operators group."
HISTORY_ROWS = 200
JOB_ROWS = 500  # of one run, on the page; the CSV has them all


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _context(request: HttpRequest, form: RequestForm | None = None, error: str = "") -> dict:
    page = PageForm(request.GET)
    cluster = page.chosen_cluster
    runs = runs_recent(cluster.pk if cluster else None, HISTORY_ROWS)
    run = None
    if page.values["run"]:
        run = EvaluationRun.objects.filter(pk=page.values["run"]).select_related("cluster").first()
    run = run or (runs[0] if runs else None)
    figs: dict = {}
    if run is not None and run.prediction:
        p = run.prediction
        actual = run.actual_makespan_s
        x_max = max(p["baseline"]["makespan_s"], p["decoupled"]["makespan_s"], actual or 0.0)
        for kind in (PlanKind.BASELINE, PlanKind.DECOUPLED):
            figs[f"gantt-{kind}"] = figures.gantt_figure(
                p[kind], actual_makespan_s=actual if run.plan == kind else None, x_max_s=x_max
            )
        figs["makespan"] = figures.makespan_figure(p, run.plan, actual)
        figs["gpu-time"] = figures.gpu_time_figure(p, run.plan, run.actual_gpu_time_s or None)
    capacity = cluster_capacity(cluster.pk) if cluster else []
    phase_rows = []
    if run is not None and run.prediction:
        measured = run.actual_gpu_time_s or {}
        measured_total = sum(measured.values()) or None
        for phase, label in figures.PHASE_LABELS.items():
            row = [label]
            for kind in (PlanKind.BASELINE, PlanKind.DECOUPLED):
                plan = run.prediction[kind]
                row += [plan["gpu_time_s"][phase] / 3600, plan["gpu_share"][phase]]
            seconds = measured.get(phase)
            row += [
                None if seconds is None else seconds / 3600,
                None if seconds is None or not measured_total else seconds / measured_total,
            ]
            phase_rows.append(row)
    return {
        "clusters": PageForm.base_fields["cluster"].queryset.all(),  # a fresh query each time
        "cluster": cluster,
        "capacity": capacity,
        "capacity_gpus": sum(n.gpus for n in capacity),
        "runs": runs,
        "run": run,
        "jobs": run_jobs(run)[:JOB_ROWS] if run else [],
        "jobs_total": run.jobs.count() if run else 0,
        "job_rows": JOB_ROWS,
        "figures": figs,
        "is_operator": user_is_operator(request.user),
        "form": form or RequestForm(initial={"cluster": cluster.name if cluster else ""}),
        "error": error or page.error,
        "plans": PlanKind.choices,
        "phase_rows": phase_rows,
        "suite": ", ".join(name for name, _, _ in DEFAULT_SUITE[:10]),
    }


def evaluation_page(request: HttpRequest) -> HttpResponse:
    context = _context(request)
    return render(request, "evaluation/page.html", context, status=400 if context["error"] else 200)


@require_POST
def evaluation_submit(request: HttpRequest) -> HttpResponse:
    if not user_is_operator(request.user):
        if _wants_json(request):
            return JsonResponse({"error": OPERATORS_ONLY}, status=403)
        return HttpResponseForbidden(OPERATORS_ONLY, content_type="text/plain")
    form = RequestForm(request.POST)
    error = form.error
    run = None
    if error is None:
        try:
            run = evaluation_request(
                cluster_name=form.cleaned_data["cluster"].name,
                model_path=form.cleaned_data["model_path"],
                datasets=form.dataset_names,
                nodes=form.cleaned_data["nodes"],
                gpus_per_node=form.cleaned_data["gpus_per_node"],
                plan=form.cleaned_data["plan"],
                model_size_gb=form.cleaned_data["model_size_gb"],
                user=request.user.get_username(),
            )
        except EvaluationError as exc:
            error = str(exc)
    if error is not None:
        if _wants_json(request):
            return JsonResponse({"error": error}, status=400)
        return render(request, "evaluation/page.html", _context(request, form, error), status=400)
    if _wants_json(request):
        return JsonResponse({"run": run.pk, "prediction": run.prediction["speedup"]}, status=201)
    return redirect(f"{reverse('evaluation:page')}?cluster={run.cluster.name}&run={run.pk}")


# --- CSV -------------------------------------------------------------------------------------


def runs_csv(request: HttpRequest) -> HttpResponse:
    cluster = PageForm(request.GET).values["cluster"]
    runs = runs_recent(cluster.pk if cluster else None, 100_000)
    return tables.RUNS.csv_response("evaluation-runs.csv", runs)


def jobs_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(EvaluationRun, pk=run_id)
    rows = ((run, j) for j in run_jobs(run))
    return tables.JOBS.csv_response(f"evaluation-{run.pk}-jobs.csv", rows)


def plan_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    """Both plans as predicted (the Gantt charts' data)."""
    run = get_object_or_404(EvaluationRun, pk=run_id)
    rows = (
        (kind, j)
        for kind in (PlanKind.BASELINE, PlanKind.DECOUPLED)
        for j in run.prediction.get(kind, {}).get("plan", [])
    )
    return tables.PLANS.csv_response(f"evaluation-{run.pk}-plans.csv", rows)


def estimates_csv(request: HttpRequest) -> HttpResponse:
    return tables.ESTIMATES.csv_response("evaluation-estimates.csv", RuntimeEstimate.objects.all())


def characterization_csv(request: HttpRequest) -> HttpResponse:
    """The characterization page's evaluation phases (phases.py)."""
    form = PhasesForm(request.GET)
    if form.window is None:
        return JsonResponse({"error": form.error or "cluster: none chosen"}, status=400)
    phases = eval_phases(form.window)
    return tables.PHASES.csv_response(
        f"evaluation-phases-{form.window.cluster.name}.csv",
        ((phase, phases) for phase in EVAL_PHASES),
    )
