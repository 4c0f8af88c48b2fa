"""Recovery pages: a cluster's recovery (figures, headline numbers, its mode, recent plans),
the approvals queue, the nodes out of service, one action's audit; every table has a CSV
export (api_urls.py).

Everyone logged in reads; only operators act (set a mode, approve, reject, return a node to
service), by POST with the CSRF token. A refused request changes nothing: the service raises
RecoveryError before writing, and the page is shown again with its message (400), or a JSON
error for a client that asked for JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from webapp.core.nav import Tab, Tabs
from webapp.core.tables import Table
from webapp.core.windows import Window
from webapp.failures.models import FailureEvent
from webapp.fleet.models import Cluster, Node
from webapp.jobs.models import JobAllocation
from webapp.recovery import figures, services, tables
from webapp.recovery.choices import ActionKind, ActionStatus, ExecutorKind, Mode
from webapp.recovery.forms import ActionsForm, ListForm, ModeForm, RecoveryForm, RejectForm
from webapp.recovery.models import RecoveryAction
from webapp.recovery.selectors import (
    PHASES,
    OutGroup,
    actions_filter,
    approvals_queue,
    approvals_waiting,
    cluster_mode_meaning,
    cluster_recovery,
    drained_nodes,
    failure_timeline,
    node_drains,
    nodes_out_by_reason,
    plans_counted,
    plans_filter,
)
from webapp.teams.selectors import user_is_operator

PLANS_PER_PAGE = 50
APPROVALS_PER_PAGE = 50
NODES_PER_PAGE = 100
CSV_MAX_ROWS = 100_000  # as the failure exports
# The recovery pages' sub-navigation (`{% subnav "webapp.recovery.views.TABS" "nodes" %}`).
TABS = Tabs(
    "recovery pages",
    (
        Tab("cluster", "recovery:cluster", "Recovery", keep_cluster=True),
        Tab(
            "approvals",
            "recovery:approvals",
            "Approvals",
            count=approvals_waiting,
            count_id="approvals-waiting",
        ),
        Tab("nodes", "recovery:nodes", "Nodes out of service"),
    ),
)

OPERATORS_ONLY = "Only operators may change recovery: ask one, or join the operators group."


def _forbidden(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"error": OPERATORS_ONLY}, status=403)
    return HttpResponseForbidden(OPERATORS_ONLY, content_type="text/plain")


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _query(request: HttpRequest, *drop: str) -> str:
    params = request.GET.copy()
    for name in ("page", *drop):
        params.pop(name, None)
    return params.urlencode()


def _simulated(executor: str) -> bool:
    return executor == ExecutorKind.SIMULATED


# --- The cluster's recovery ------------------------------------------------------------------


def _recovery_context(request: HttpRequest) -> dict:
    form = RecoveryForm(request.GET)
    cluster, days = form.chosen_cluster, form.values["days"]
    context = {
        "clusters": Cluster.objects.order_by("name"),
        "cluster": cluster,
        "days": days,
        "error": form.error,
        "query": _query(request),
        "is_operator": user_is_operator(request.user),
        "modes": Mode.choices,
        "PHASES": PHASES,
    }
    if cluster is None:
        return context
    now = timezone.now()
    window = Window(cluster, now - timedelta(days=days), now)
    r = cluster_recovery(window)
    policy = services.recovery_policy(cluster.pk)
    context.update(
        r=r,
        policy=policy,
        policy_simulated=_simulated(policy.executor),
        meaning=cluster_mode_meaning(policy.mode),
        plans=_plans_page(window, form.values["page"]),
        phases=[(p, figures.PHASE_LABELS[p], r.phases[p]) for p in PHASES],
        figures={
            "actions": figures.actions_figure(r.over_time, r.bucket),
            "phases": figures.phases_figure(r.phases),
        },
    )
    return context


def _plans_page(window: Window, number: int):
    """One page of the window's plans: counted plain, then the page's rows with their counts."""
    page = Paginator(plans_filter(window), PLANS_PER_PAGE).get_page(number)
    ids = [p.pk for p in page.object_list]
    page.object_list = list(plans_counted(plans_filter(window).filter(pk__in=ids)))
    return page


def recovery_page(request: HttpRequest) -> HttpResponse:
    context = _recovery_context(request)
    return render(
        request, "recovery/cluster.html", context, status=400 if context["error"] else 200
    )


@require_POST
def policy_set(request: HttpRequest) -> HttpResponse:
    if not user_is_operator(request.user):
        return _forbidden(request)
    form = ModeForm(request.POST)
    error = form.error
    if error is None:
        cluster, mode = form.cleaned_data["cluster"], form.cleaned_data["mode"]
        try:
            services.recovery_policy_set(cluster.pk, mode=mode, user=request.user.get_username())
        except services.RecoveryError as exc:
            error = str(exc)
    if error is not None:
        if _wants_json(request):
            return JsonResponse({"error": error}, status=400)
        context = _recovery_context(request)
        context["error"] = error
        return render(request, "recovery/cluster.html", context, status=400)
    if _wants_json(request):
        return JsonResponse({"cluster": cluster.name, "mode": mode})
    messages.success(request, f"{cluster.name} now recovers in mode {Mode(mode).label}.")
    return redirect(reverse("recovery:cluster") + "?" + urlencode({"cluster": cluster.name}))


# --- Approvals -------------------------------------------------------------------------------


def _approvals_context(request: HttpRequest) -> dict:
    form = ListForm(request.GET)
    cluster = form.values["cluster"]
    page = Paginator(approvals_queue(cluster.pk if cluster else None), APPROVALS_PER_PAGE)
    return {
        "clusters": Cluster.objects.order_by("name"),
        "cluster": cluster,
        "page": page.get_page(form.values["page"]),
        "query": _query(request),
        "error": form.error,
        "is_operator": user_is_operator(request.user),
    }


def approvals(request: HttpRequest) -> HttpResponse:
    context = _approvals_context(request)
    return render(
        request, "recovery/approvals.html", context, status=400 if context["error"] else 200
    )


def _decided(request: HttpRequest, decide, verb: str) -> HttpResponse:
    """Approve or reject; a refusal (already ran, unknown) shows the queue again with why."""
    if not user_is_operator(request.user):
        return _forbidden(request)
    try:
        action = decide()
    except services.RecoveryError as exc:
        if _wants_json(request):
            return JsonResponse({"error": str(exc)}, status=400)
        context = _approvals_context(request)
        context["error"] = str(exc)
        return render(request, "recovery/approvals.html", context, status=400)
    if _wants_json(request):
        return JsonResponse({"action": action.pk, "status": action.status})
    messages.success(request, f"Action {action.pk} ({action.get_kind_display().lower()}) {verb}.")
    return redirect("recovery:approvals")


@require_POST
def action_approve(request: HttpRequest, action_id: int) -> HttpResponse:
    user = request.user.get_username()
    return _decided(
        request,
        lambda: services.action_approve(action_id, user),
        "approved: it runs once the cluster's recovery worker takes it",
    )


@require_POST
def action_reject(request: HttpRequest, action_id: int) -> HttpResponse:
    form = RejectForm(request.POST)
    why = form.cleaned_data["why"] if form.is_valid() else ""
    user = request.user.get_username()
    return _decided(
        request,
        lambda: services.action_reject(action_id, user, why),
        "rejected; the actions after it are cancelled",
    )


# --- Nodes out of service --------------------------------------------------------------------


def _nodes_context(request: HttpRequest) -> dict:
    form = ListForm(request.GET)
    cluster = form.values["cluster"]
    page = Paginator(drained_nodes(cluster.pk if cluster else None), NODES_PER_PAGE).get_page(
        form.values["page"]
    )
    return {
        "clusters": Cluster.objects.order_by("name"),
        "cluster": cluster,
        "page": page,
        "rows": _node_rows(list(page)),
        **_out_by_reason_folded(nodes_out_by_reason(cluster.pk if cluster else None)),
        "query": _query(request),
        "error": form.error,
        "is_operator": user_is_operator(request.user),
    }


# Reasons the nodes page lists one by one, the largest groups first; the rest are one row (each
# node's own reason is in the table below it and the CSV).
OUT_REASONS_SHOWN = 12


def _out_by_reason_folded(groups: list[OutGroup]) -> dict:
    """The page's reason table: the OUT_REASONS_SHOWN largest groups, and the rest summed."""
    if len(groups) <= OUT_REASONS_SHOWN:
        return {"out_by_reason": groups, "out_rest": None}
    rest = groups[OUT_REASONS_SHOWN:]
    longest = [g.longest_s for g in rest if g.longest_s is not None]
    return {
        "out_by_reason": groups[:OUT_REASONS_SHOWN],
        "out_rest": OutGroup(
            f"({len(rest)} other reasons)",
            sum(g.count for g in rest),
            max(longest) if longest else None,
            False,
        ),
    }


def _node_rows(nodes: list[Node]) -> list[dict]:
    """The page's and the CSV's rows (tables.NODES): each node with the drains behind it."""
    drains = node_drains([n.pk for n in nodes])
    return [
        {
            "node": n,
            # Node.state_reason / state_since come with the scheduler watcher's node states.
            "reason": getattr(n, "state_reason", ""),
            "since": getattr(n, "state_since", None),
            "drains": drains.get(n.pk, []),
        }
        for n in nodes
    ]


def nodes(request: HttpRequest) -> HttpResponse:
    context = _nodes_context(request)
    return render(request, "recovery/nodes.html", context, status=400 if context["error"] else 200)


@require_POST
def node_return(request: HttpRequest, node_id: int) -> HttpResponse:
    if not user_is_operator(request.user):
        return _forbidden(request)
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=node_id)
    try:
        plan = services.node_return_to_service(node, request.user.get_username())
    except services.RecoveryError as exc:
        if _wants_json(request):
            return JsonResponse({"error": str(exc)}, status=400)
        context = _nodes_context(request)
        context["error"] = str(exc)
        return render(request, "recovery/nodes.html", context, status=400)
    steps = " then ".join(a.get_kind_display().lower() for a in plan.actions.order_by("seq"))
    if _wants_json(request):
        return JsonResponse({"plan": plan.pk, "node": node.hostname, "mode": plan.mode})
    note = " (dry run: recorded, not run)" if plan.mode == Mode.DRY_RUN else ""
    messages.success(request, f"{node.hostname}: {steps} planned (plan {plan.pk}){note}.")
    return redirect(reverse("recovery:nodes") + "?" + urlencode({"cluster": node.cluster.name}))


# --- One action ------------------------------------------------------------------------------


def _action(action_id: int) -> RecoveryAction:
    return get_object_or_404(
        RecoveryAction.objects.select_related("cluster", "plan", "plan__failure", "node", "job"),
        pk=action_id,
    )


def action_detail(request: HttpRequest, action_id: int) -> HttpResponse:
    action = _action(action_id)
    siblings = list(action.plan.actions.exclude(pk=action.pk).order_by("seq", "id"))
    return render(
        request,
        "recovery/action.html",
        {
            "action": action,
            "plan": action.plan,
            "failure": action.plan.failure,
            "simulated": _simulated(action.executor),
            "siblings": siblings,
            "steps": _steps(action),
            "jobs_affected": _jobs_affected(action, siblings),
        },
    )


# The plan's steps that act on a job, and what the drain page says each did to it.
_JOB_STEPS = {ActionKind.REQUEUE: "Requeued", ActionKind.RESUBMIT: "Resubmitted"}


def _jobs_affected(action: RecoveryAction, siblings: list[RecoveryAction]) -> list[dict] | None:
    """A drain's jobs: those holding GPUs of the node from the failure until the drain ran
    (a job the failure killed just before the drain counts too), and any the plan requeued
    or resubmitted, each with what the plan did to it. None for any other action. One query."""
    if action.kind != ActionKind.DRAIN or action.node_id is None:
        return None
    at = action.started_at or action.created_at
    failure = action.plan.failure
    since = min(failure.occurred_at, at) if failure is not None else at
    steps = {s.job_id: s for s in siblings if s.kind in _JOB_STEPS and s.job_id is not None}
    held = (
        JobAllocation.objects.filter(node_id=action.node_id, start__lte=at)
        .filter(Q(end__isnull=True) | Q(end__gte=since))
        .values_list("job_id", flat=True)
    )
    rows: dict[int, dict] = {}
    allocations = (
        JobAllocation.objects.filter(
            Q(job_id__in=held) | Q(job_id__in=list(steps)), node_id=action.node_id
        )
        .select_related("job")
        .order_by("job__submit_at", "job_id", "gpu_index")
    )
    for a in allocations:
        row = rows.setdefault(a.job_id, {"job": a.job, "gpus": set(), "step": steps.get(a.job_id)})
        if a.start <= at and (a.end is None or a.end >= since):
            row["gpus"].add(a.gpu_index)
    for row in rows.values():
        step = row["step"]
        row["gpus"] = sorted(row["gpus"])
        row["done"] = (
            (_JOB_STEPS[step.kind] if step.status == ActionStatus.SUCCEEDED else None)
            if step
            else None
        )
    return list(rows.values())


def _steps(action: RecoveryAction) -> list[dict]:
    """Each command as planned, with every time it was run (a retried command runs again)."""
    runs: dict[int, list[dict]] = {}
    for step in action.steps or []:
        runs.setdefault(step.get("i"), []).append(step)
    return [
        {"i": i, "argv": argv, "runs": runs.get(i, [])} for i, argv in enumerate(action.commands)
    ]


# --- CSV exports -----------------------------------------------------------------------------


def _refused(error: str) -> HttpResponse:
    """A CSV asked with a filter it cannot honour (`days=-5`): 400 naming the field, as the
    page says, never a file of the default window."""
    return HttpResponse(error, status=400, content_type="text/plain")


def _csv_window(
    request: HttpRequest, form_class: type[RecoveryForm] = RecoveryForm
) -> tuple[Window | None, dict, str | None]:
    """The window a CSV's query names (None: no cluster yet), the form's values, and why the
    query cannot be honoured (None when it can)."""
    form = form_class(request.GET)
    cluster = form.chosen_cluster
    if form.error or cluster is None:
        return None, form.values, form.error
    now = timezone.now()
    return Window(cluster, now - timedelta(days=form.values["days"]), now), form.values, None


def _summary_rows(window: Window) -> list[dict]:
    r = cluster_recovery(window)
    rows = []
    for phase in (*PHASES, "recover"):
        stats = r.phases.get(phase) or {
            "n": None,
            "median_s": r.recover_median_s,
            "p95_s": r.recover_p95_s,
        }
        rows.append(("time_to_recover", phase, stats["n"], stats["median_s"], stats["p95_s"]))
    rows += [
        ("actions", "total", r.actions, None, None),
        ("actions", "ran", r.ran, None, None),
        ("actions", "succeeded", r.succeeded, r.success_rate, None),
        ("actions", "simulated", r.simulated, None, None),
        ("failures", "planned", r.failures, None, None),
        ("failures", "planned_live", r.live_failures, None, None),
        ("failures", "replayed", r.late, None, None),
        ("failures", "recovered_without_a_human", r.auto_recovered, r.avoided_share, None),
    ]
    keys = ("group", "name", "count", "median_s_or_share", "p95_s")
    return [{"cluster": window.cluster.name, **dict(zip(keys, row, strict=True))} for row in rows]


def _cluster_csv(
    request: HttpRequest, what: str, table: Table, rows_of: Callable[[Window], Iterable]
) -> HttpResponse:
    """A CSV of the cluster's recovery in the query's window; none chosen: the header alone."""
    window, _, error = _csv_window(request)
    if error:
        return _refused(error)
    name = f"recovery-{window.cluster.name if window else 'none'}-{what}.csv"
    return table.csv_response(name, rows_of(window) if window else [])


def summary_csv(request: HttpRequest) -> HttpResponse:
    return _cluster_csv(request, "summary", tables.SUMMARY, _summary_rows)


def over_time_csv(request: HttpRequest) -> HttpResponse:
    return _cluster_csv(
        request, "actions-over-time", tables.OVER_TIME, lambda w: cluster_recovery(w).over_time
    )


def plans_csv(request: HttpRequest) -> HttpResponse:
    window, _, error = _csv_window(request)
    if error:
        return _refused(error)
    plans = (
        plans_counted(plans_filter(window)).select_related("cluster")[:CSV_MAX_ROWS].iterator(2000)
        if window
        else []
    )
    return tables.PLANS.csv_response("recovery-plans.csv", plans)


def actions_csv(request: HttpRequest) -> HttpResponse:
    window, v, error = _csv_window(request, ActionsForm)
    if error:
        return _refused(error)
    if window is None:
        return tables.ACTIONS.csv_response("recovery-actions.csv", [])
    qs = actions_filter(
        cluster_id=window.cluster.id,
        status=v["status"],
        kind=v["kind"],
        executor=v["executor"],
        since=window.since,
        until=window.until,
    )
    return tables.ACTIONS.csv_response(
        f"recovery-{window.cluster.name}-actions.csv", qs[:CSV_MAX_ROWS].iterator(2000)
    )


def approvals_csv(request: HttpRequest) -> HttpResponse:
    cluster = ListForm(request.GET).values["cluster"]
    queue = approvals_queue(cluster.pk if cluster else None).select_related(None)
    rows = queue.select_related("cluster", "plan")[:CSV_MAX_ROWS].iterator(2000)
    return tables.ACTIONS.csv_response("recovery-approvals.csv", rows)


def nodes_csv(request: HttpRequest) -> HttpResponse:
    cluster = ListForm(request.GET).values["cluster"]
    nodes = list(drained_nodes(cluster.pk if cluster else None)[:CSV_MAX_ROWS])
    return tables.NODES.csv_response("recovery-nodes.csv", _node_rows(nodes))


def action_steps_csv(request: HttpRequest, action_id: int) -> HttpResponse:
    action = _action(action_id)
    rows = ({**step, "action": action.pk} for step in action.steps or [])
    return tables.STEPS.csv_response(f"recovery-action-{action.pk}-steps.csv", rows)


def failure_timeline_csv(request: HttpRequest, failure_id: int) -> HttpResponse:
    failure = get_object_or_404(FailureEvent, pk=failure_id)
    rows = ((failure.pk, p) for p in failure_timeline(failure).phases)
    return tables.TIMELINE.csv_response(f"failure-{failure.pk}-recovery.csv", rows)
