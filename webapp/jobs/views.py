"""Jobs pages: workload characterization, the job list, one job, and GPUs left idle; each table
and figure has a CSV export."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from webapp.core.charts import series_figure
from webapp.core.pages import not_found
from webapp.fleet.models import Cluster
from webapp.jobs import figures, tables
from webapp.jobs.characterization import (
    FINAL_GROUPS,
    Characterization,
    TelemetryCdfs,
    telemetry_cdfs,
)
from webapp.jobs.choices import JobState, JobType
from webapp.jobs.data.reference import reference_cdfs, reference_summary_rows, summary_columns
from webapp.jobs.dispatch import job_energy_asked, job_incident_asked
from webapp.jobs.forms import JOB_SORTS, CharacterizationForm, JobListForm, WastedForm
from webapp.jobs.job_page import (
    allocation_by_node,
    allocation_size,
    energy_by_node,
    event_words,
    job_bands,
    job_gpu_limits,
    job_means,
    job_timeline,
    job_verdict,
    outlier_rows,
)
from webapp.jobs.models import Job
from webapp.jobs.selectors import (
    SERIES_GPUS_MAX,
    characterization_cached,
    job_allocations_for,
    job_series,
    job_span,
    jobs_filter,
    waste_totals,
    wasted_gpus,
)
from webapp.teams.selectors import job_team_names

JOBS_PER_PAGE = 50
CSV_MAX_ROWS = 100_000  # a list export larger than this is cut (and says so in its name)

# Labels of cluster_summary.csv's columns, for the summary table (units in the label).
SUMMARY_LABELS: dict[str, str] = {
    "job_num": "jobs",
    "cpu_job_num": "CPU jobs",
    "gpu_job_num": "GPU jobs",
    "avg_run_time_gpu": "GPU job duration, mean (s)",
    "med_run_time_gpu": "GPU job duration, median (s)",
    "max_run_time_gpu": "GPU job duration, max (s)",
    "avg_que_time_gpu": "GPU job queueing, mean (s)",
    "med_que_time_gpu": "GPU job queueing, median (s)",
    "avg_gpu_num": "GPUs per GPU job, mean",
    "med_gpu_num": "GPUs per GPU job, median",
    "max_gpu": "GPUs per GPU job, max",
    "complete_rate_gpu": "completed (share of GPU jobs)",
    "cancel_rate_gpu": "cancelled (share of GPU jobs)",
    "fail_rate_gpu": "failed (share of GPU jobs)",
    "complete_gpu_time": "completed GPU time (GPU-s)",
    "cancel_gpu_time": "cancelled GPU time (GPU-s)",
    "fail_gpu_time": "failed GPU time (GPU-s)",
    "complete_rate_gpu_time": "completed (share of GPU time)",
    "cancel_rate_gpu_time": "cancelled (share of GPU time)",
    "fail_rate_gpu_time": "failed (share of GPU time)",
    "avg_run_time_cpu": "CPU job duration, mean (s)",
    "med_run_time_cpu": "CPU job duration, median (s)",
    "avg_que_time_cpu": "CPU job queueing, mean (s)",
    "med_que_time_cpu": "CPU job queueing, median (s)",
    "complete_rate_cpu": "completed (share of CPU jobs)",
    "cancel_rate_cpu": "cancelled (share of CPU jobs)",
    "fail_rate_cpu": "failed (share of CPU jobs)",
}


# --- Characterization --------------------------------------------------------------------------


def _summary_table(result: Characterization) -> tuple[list[str], list[tuple[str, list]]]:
    reference = reference_summary_rows()
    sources = [result.summary["id"], *(r["id"] for r in reference)]
    rows = [
        (SUMMARY_LABELS.get(col, col), [result.summary.get(col), *(r[col] for r in reference)])
        for col in summary_columns()
        if col != "id"
    ]
    return sources, rows


def characterization(request: HttpRequest) -> HttpResponse:
    form = CharacterizationForm(request.GET)
    window, error = form.window, form.error
    context: dict = {"clusters": Cluster.objects.order_by("name"), "error": error, "window": window}
    if window is None:
        return render(request, "jobs/characterization.html", context, status=400 if error else 200)
    result = characterization_cached(window)
    telemetry = telemetry_cdfs(window.cluster, window.since, window.until)
    site = window.cluster.name
    refs = reference_cdfs()
    states = {s.group: s for s in result.states}
    sources, summary_rows = _summary_table(result)
    context.update(
        result=result,
        telemetry=telemetry,
        summary_sources=sources,
        summary_rows=summary_rows,
        query=request.GET.urlencode(),
        figures={
            "types": figures.type_shares_figure(result.types),
            "duration": figures.cdf_figure(result.duration_cdf, x_title="job duration (s)"),
            "queue": figures.cdf_figure(result.queue_cdf, x_title="queueing delay (s)"),
            "gpus": figures.cdf_figure(result.gpus_cdf, x_title="GPUs per job"),
            "states": figures.states_figure(
                site,
                {g: states[g].count_share for g in FINAL_GROUPS},
                {g: states[g].gpu_time_share for g in FINAL_GROUPS},
                reference_summary_rows(),
            ),
            "telemetry": figures.telemetry_figure(site, telemetry, refs),
        },
    )
    return render(request, "jobs/characterization.html", context)


def _cdf_rows(cdfs: dict[str, list[tuple[float, float]]]) -> Iterable[list]:
    for job_type, points in cdfs.items():
        for x, y in points:
            yield [job_type, x, round(y, 6)]


def _telemetry_rows(site: str, t: TelemetryCdfs) -> Iterable[list]:
    for metric, points in t.curves.items():
        for value, share in points:
            yield [metric, site, "site", round(value, 4), round(100 * share, 3)]
    for metric, curves in reference_cdfs().items():
        scale = figures.GIB_PER_80GIB_PCT if metric == "mem_used" else 1.0
        for curve in curves:
            for value, pct in curve["points"]:
                yield [metric, curve["cluster"], curve["source_file"], value * scale, pct]


def characterization_csv(request: HttpRequest, name: str) -> HttpResponse:
    form = CharacterizationForm(request.GET)
    window, error = form.window, form.error
    if window is None:
        return HttpResponse(error or "no cluster", status=400, content_type="text/plain")
    site = window.cluster.name
    filename = f"vigil-{site}-{name}.csv"
    if name == "telemetry":
        t = telemetry_cdfs(window.cluster, window.since, window.until)
        return tables.TELEMETRY_CDF.csv_response(filename, _telemetry_rows(site, t))
    result = characterization_cached(window)
    if name == "types":
        return tables.TYPES.csv_response(filename, [*result.types, result.total])
    if name == "duration":
        return tables.DURATION_CDF.csv_response(filename, _cdf_rows(result.duration_cdf))
    if name == "queue":
        return tables.QUEUE_CDF.csv_response(filename, _cdf_rows(result.queue_cdf))
    if name == "gpus":
        return tables.GPUS_CDF.csv_response(filename, _cdf_rows(result.gpus_cdf))
    if name == "states":
        return tables.STATES.csv_response(filename, result.states)
    if name == "summary":
        return tables.SUMMARY.csv_response(filename, [result.summary, *reference_summary_rows()])
    raise Http404(f"no export named {name!r}")


# --- Job list and job page ---------------------------------------------------------------------


def job_list(request: HttpRequest) -> HttpResponse:
    form = JobListForm(request.GET)
    error = form.error
    filters = form.filters
    jobs = jobs_filter(**filters)
    if filters["scheduler_id"] and not error:
        # A Slurm admin types a job id: one job with it goes straight to its page (the same id
        # on several clusters lists them).
        found = list(jobs[:2])
        if len(found) == 1:
            return redirect("jobs:detail", found[0].id)
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(form.values["page"])
    params = request.GET.copy()
    params.pop("page", None)
    return render(
        request,
        "jobs/list.html",
        {
            "page": page,
            "form": form,
            "error": error,
            "filters": filters,
            "query": params.urlencode(),
            "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
            "types": JobType.choices,
            "states": JobState.choices,
            "sorts": [(k, label) for k, (_, label) in JOB_SORTS.items()],
        },
        status=400 if error else 200,
    )


def job_by_scheduler_id(request: HttpRequest, scheduler_id: str) -> HttpResponse:
    """`/jobs/id/<scheduler id>/`: the URL a Slurm admin builds from `squeue`'s JOBID."""
    return redirect(f"{reverse('jobs:list')}?{urlencode({'id': scheduler_id})}")


def job_list_csv(request: HttpRequest) -> HttpResponse:
    form = JobListForm(request.GET)
    if form.error:
        return HttpResponse(form.error, status=400, content_type="text/plain")
    qs = jobs_filter(**form.filters)[:CSV_MAX_ROWS]
    return tables.JOBS.csv_response("vigil-jobs.csv", qs.iterator(chunk_size=2000))


def _failures_url(job: Job) -> str | None:
    """The failures app's page of this job once it has one (URL name "failures:job")."""
    try:
        return reverse("failures:job", args=[job.id])
    except NoReverseMatch:
        return None


def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    """One job at any size: a job of up to SERIES_GPUS_MAX GPUs draws a line per GPU; a larger
    one draws bands across its GPUs with the outliers named, and its allocation and energy
    per node (the per-GPU energy folded away until asked for)."""
    job = Job.objects.select_related("cluster").filter(id=job_id).first()
    if job is None:
        # A Slurm admin types the scheduler's JOBID where Vigil's own id goes.
        search = f"{reverse('jobs:list')}?{urlencode({'id': job_id})}"
        return not_found(
            request,
            reason=f"Vigil has no job {job_id} (this address takes Vigil's own job number).",
            hint=f"Search for scheduler job id {job_id}",
            hint_url=search,
        )
    now = timezone.now()
    allocations = job_allocations_for(job)
    # The job's energy is the energy app's, one figure set (jobs does not import it).
    energy = job_energy_asked(job, allocations, now)
    start, end = job_span(job, allocations, now)
    small = len(allocations) <= SERIES_GPUS_MAX
    events = list(job.events.all())
    # Failures, diagnoses, GPU errors and recovery actions come from the apps above jobs.
    timeline = job_timeline(events, job_incident_asked(job))
    context: dict = {
        "job": job,
        "allocations": allocations,
        "small": small,
        "nodes": energy_by_node(energy),
        # GPUs and nodes of the latest run: a requeued job has an allocation row per run.
        "size": allocation_size(allocations),
        "energy": energy,
        "events": [(e, event_words(e.detail)) for e in events],
        "timeline": timeline,
        # Vigil's team (the rules' answer); the scheduler's account is job.team.
        "team": job_team_names([job])[0],
        "failures_url": _failures_url(job),
        "now": now,
    }
    figs: dict = {}
    if small:
        telemetry = job_series(job, allocations, now=now)
        energy_of = {e.allocation.id: e for e in energy.per_gpu} if energy else {}
        context.update(
            telemetry=telemetry,
            source=telemetry.source,
            has_samples=any(s.ts for s in telemetry.series.values()),
            rows=[(a, energy_of.get(a.id)) for a in allocations],
        )
        if allocations:
            figs["allocations"] = figures.allocation_timeline(allocations, now)
        if context["has_samples"]:
            figs["series"] = series_figure(telemetry.series, x_range=(start, end))
        means = job_means(job, allocations, now=now) if allocations else {}
    else:
        bands = job_bands(job, allocations, now=now)
        labels = {a.id: a.label for a in allocations}
        edges, per_node = allocation_by_node(allocations, start, end, now=now)
        context.update(
            bands=bands,
            source=bands.source,
            has_samples=bands.has_samples,
            outliers=outlier_rows(bands.outliers),
        )
        figs["allocations"] = figures.allocation_heatmap(edges, per_node)
        # No samples: the page states it; an empty chart draws Plotly's default axes.
        if bands.has_samples:
            figs["series"] = figures.bands_figure(bands, labels)
        figs["energy"] = figures.node_energy_figure(context["nodes"])
        means = bands.means
    power_limit_w, memory_total_bytes = job_gpu_limits(allocations)
    context["verdict"] = job_verdict(
        means,
        allocations,
        power_limit_w=power_limit_w,
        memory_total_bytes=memory_total_bytes,
        busy_util_pct=settings.VIGIL_BUSY_UTIL_PCT,
    )
    context["figures"] = figs
    return render(request, "jobs/detail.html", context)


def job_detail_csv(request: HttpRequest, job_id: int, name: str) -> HttpResponse:
    """The job page's tables as CSV: timeline, allocations (with energy), outliers (a job of
    more than SERIES_GPUS_MAX GPUs) and energy per node."""
    job = Job.objects.select_related("cluster").filter(id=job_id).first()
    if job is None:
        return HttpResponse(f"Vigil has no job {job_id}.", status=404, content_type="text/plain")
    filename = f"vigil-job-{job.cluster.name}-{job.scheduler_id}-{name}.csv"
    if name == "timeline":
        timeline = job_timeline(list(job.events.all()), job_incident_asked(job))
        return tables.JOB_TIMELINE.csv_response(filename, timeline)
    now = timezone.now()
    allocations = job_allocations_for(job)
    if name == "outliers":
        bands = job_bands(job, allocations, now=now)
        return tables.JOB_OUTLIERS.csv_response(filename, outlier_rows(bands.outliers))
    energy = job_energy_asked(job, allocations, now)
    if name == "allocations":
        energy_of = {e.allocation.id: e for e in energy.per_gpu} if energy else {}
        rows = [(a, energy_of.get(a.id)) for a in allocations]
        return tables.JOB_ALLOCATIONS.csv_response(filename, rows)
    if name == "node-energy":
        return tables.JOB_NODE_ENERGY.csv_response(filename, energy_by_node(energy))
    return HttpResponse(
        f"no table {name!r} on the job page (timeline, allocations, outliers, node-energy)",
        status=404,
        content_type="text/plain",
    )


# --- Wasted GPUs -------------------------------------------------------------------------------


def _with_teams(rows: list) -> list:
    """Each row's job with its Vigil team (`job.team_name`, "(no team)" where no rule gives
    one): the team is the teams app's, the scheduler's account is `job.team`."""
    for w, name in zip(rows, job_team_names([w.job for w in rows]), strict=True):
        w.job.team_name = name or "(no team)"
    return rows


def wasted(request: HttpRequest) -> HttpResponse:
    form = WastedForm(request.GET)
    minutes, cluster, error = form.values["minutes"], form.values["cluster"], form.error
    rows = _with_teams(
        wasted_gpus(
            busy_util_pct=settings.VIGIL_BUSY_UTIL_PCT, min_idle_minutes=minutes, cluster=cluster
        )
    )
    return render(
        request,
        "jobs/wasted.html",
        {
            "rows": rows,
            "by_user": waste_totals(rows, "user"),
            "by_team": waste_totals(rows, "team_name"),
            "minutes": minutes,
            "cluster": cluster,
            "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
            "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
            "error": error,
            "query": request.GET.urlencode(),
            "now": timezone.now(),
        },
        status=400 if error else 200,
    )


def wasted_csv(request: HttpRequest) -> HttpResponse:
    form = WastedForm(request.GET)
    minutes, cluster, error = form.values["minutes"], form.values["cluster"], form.error
    if error:
        return HttpResponse(error, status=400, content_type="text/plain")
    rows = _with_teams(
        wasted_gpus(
            busy_util_pct=settings.VIGIL_BUSY_UTIL_PCT, min_idle_minutes=minutes, cluster=cluster
        )
    )
    return tables.WASTED.csv_response("vigil-wasted-gpus.csv", rows)
