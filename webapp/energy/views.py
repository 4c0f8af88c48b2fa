"""Energy pages: a cluster's month (figures, breakdowns, waste, method), the printable
monthly report and its PDF (printed by a worker), CSV of every table, and the report email's
unsubscribe link. The month's report and trends are read from the cache (selectors).

Everyone logged in reads (the figures are the cluster's, as on the jobs pages); a month with
no data says so plainly, a bad month or cluster is a 400 naming the field.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.core.pages import not_found
from webapp.core.views import UnsubscribePage
from webapp.energy import figures, report, services, tables
from webapp.energy.forms import EnergyForm
from webapp.energy.models import EnergyExport, EnergyReportSubscription
from webapp.energy.selectors import NoEnergyData, month_report_cached
from webapp.energy.trends import energy_trends_cached
from webapp.fleet.models import Cluster


def _parse(request: HttpRequest):
    form = EnergyForm(request.GET)
    return form, form.chosen_cluster, form.values["month"], form.error


def energy_page(request: HttpRequest) -> HttpResponse:
    form, cluster, month, error = _parse(request)
    context = {
        "clusters": Cluster.objects.order_by("name"),
        "cluster": cluster,
        "month": month,
        "error": error,
        "query": request.GET.urlencode(),
        "r": None,
        "p": None,
        "no_data": None,
        "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
    }
    if cluster is not None and error is None:
        try:
            r, p = month_report_cached(cluster, month)
        except NoEnergyData as exc:
            context["no_data"] = str(exc)
        else:
            trends = energy_trends_cached(cluster, month)
            context.update(
                r=r,
                p=p,
                trends=trends,
                kpis=report.kpis(r, p),
                footnote=report.method_footnote(r),
                figures=figures.page_figures(r, trends),
                trend_teams=report.trend_team_table(trends),
                query=f"cluster={cluster.name}&month={month}",
                exports=EnergyExport.objects.filter(
                    cluster=cluster, month=month, kind=EnergyExport.Kind.DAILY_CSV
                )
                .select_related("requested_by")
                .defer("file_gz")[:5],
            )
    return render(request, "energy/cluster.html", context, status=400 if error else 200)


# The breakdowns' CSVs by the name in their address, with the report's attribute they list.
_LINES = {
    "teams": "by_team",
    "accounts": "by_account",
    "projects": "by_project",
    "job-types": "by_type",
    "outcomes": "by_outcome",
    "users": "by_user",
    "jobs": "top_jobs",
}


def energy_csv(request: HttpRequest, table: str) -> HttpResponse:
    if table not in (*_LINES, "days", "summary", "report", "trends"):
        raise Http404(f"no energy table {table!r}")
    _form, cluster, month, error = _parse(request)
    if error or cluster is None:
        return HttpResponse(
            error or "cluster: no cluster yet", status=400, content_type="text/plain"
        )
    try:
        r, p = month_report_cached(cluster, month)
    except NoEnergyData as exc:
        return HttpResponse(str(exc), status=404, content_type="text/plain")
    name = f"vigil-energy-{cluster.name}-{month}-{table}.csv"
    if table == "report":
        return tables.REPORT.csv_response(name, report.report_rows(r, month))
    if table == "trends":
        trends = energy_trends_cached(cluster, month)
        return tables.TRENDS.csv_response(name, report.trend_rows(cluster, trends))
    if table == "days":
        declared, rows = tables.DAYS, r.days
    elif table == "summary":
        declared, rows = tables.SUMMARY, report.kpis(r, p)
    else:
        declared, rows = tables.LINES, getattr(r, _LINES[table])
        if table == "teams" and r.idle_line:
            rows = [*rows, r.idle_line]
    return declared.csv_response(name, tables.in_month(cluster.name, month, r.method_version, rows))


def _no_data(request: HttpRequest, cluster: Cluster, month: str, exc: NoEnergyData) -> HttpResponse:
    """A month with nothing accounted, inside Vigil's 404 page: why, and the cluster's energy
    page for that month (which offers the months that have data)."""
    return not_found(
        request,
        reason=(
            f"{exc}. Energy is accounted from the hourly rollup once each hour has ended: a "
            "cluster that began reporting less than an hour ago, or a month before its first "
            "samples, has none yet."
        ),
        hint=f"The energy page of {cluster.name}, {month}",
        hint_url=f"{reverse('energy:cluster')}?cluster={cluster.name}&month={month}",
    )


def _report_or_error(request: HttpRequest):
    _form, cluster, month, error = _parse(request)
    if error or cluster is None:
        return None, HttpResponse(
            error or "cluster: no cluster yet", status=400, content_type="text/plain"
        )
    try:
        return report.report_context(cluster, month), None
    except NoEnergyData as exc:
        return None, _no_data(request, cluster, month, exc)


def report_page(request: HttpRequest) -> HttpResponse:
    context, problem = _report_or_error(request)
    if problem:
        return problem
    return HttpResponse(report.report_html(context, for_pdf=False))


# Seconds between two reloads of the page waiting for a PDF (Chromium prints in 1-3 s).
PDF_POLL_S = 3


def report_pdf(request: HttpRequest) -> HttpResponse:
    """The month's report as a PDF, printed by a worker (Chromium never runs in a web
    request): served once made; until then a page that says so and reloads. Asking again, by
    anyone, waits for the same print; a new one is printed only when the data changed."""
    _form, cluster, month, error = _parse(request)
    if error or cluster is None:
        return HttpResponse(
            error or "cluster: no cluster yet", status=400, content_type="text/plain"
        )
    try:
        month_report_cached(cluster, month)
    except NoEnergyData as exc:
        return _no_data(request, cluster, month, exc)
    export = services.export_request(
        cluster, month, request.user, kind=EnergyExport.Kind.REPORT_PDF
    )
    if export.status == EnergyExport.Status.DONE:
        # The request found it without its file (list queries defer it): read it now.
        built = EnergyExport.objects.select_related("cluster").get(pk=export.pk)
        return _export_file_response(built, inline=True)
    if export.status == EnergyExport.Status.FAILED:
        return HttpResponse(
            f"the PDF could not be made: {export.error}", status=503, content_type="text/plain"
        )
    return render(
        request, "energy/pdf_wait.html", {"export": export, "poll_s": PDF_POLL_S}, status=202
    )


def _export_file_response(export: EnergyExport, *, inline: bool = False) -> HttpResponse:
    response = HttpResponse(services.export_file(export), content_type=export.content_type)
    how = "inline" if inline else "attachment"
    response["Content-Disposition"] = f'{how}; filename="{export.filename}"'
    return response


@require_POST
def export_create(request: HttpRequest) -> HttpResponse:
    """Ask for the month's daily CSV (reference §8): a background task builds it; the page
    lists it with its link, and the requester gets the link by email."""
    form = EnergyForm(request.POST)
    cluster, month, error = form.chosen_cluster, form.values["month"], form.error
    if error or cluster is None:
        return HttpResponse(
            error or "cluster: no cluster yet", status=400, content_type="text/plain"
        )
    services.export_request(cluster, month, request.user)
    query = f"cluster={cluster.name}&month={month}"
    return redirect(f"{reverse('energy:cluster')}?{query}#exports")


def export_download(request: HttpRequest, pk: int) -> HttpResponse:
    export = get_object_or_404(EnergyExport.objects.select_related("cluster"), pk=pk)
    if export.status != EnergyExport.Status.DONE:
        return HttpResponse(
            f"export {pk} is {export.status}{': ' + export.error if export.error else ''}",
            status=409 if export.status != EnergyExport.Status.FAILED else 404,
            content_type="text/plain",
        )
    return _export_file_response(export, inline=export.kind == EnergyExport.Kind.REPORT_PDF)


# The report email's unsubscribe link: core's page (no login: the signed token is the proof).
UNSUBSCRIBE_PAGE = UnsubscribePage(
    purpose=services.UNSUBSCRIBE_PURPOSE,
    title="the monthly energy report",
    find=lambda pk: (
        EnergyReportSubscription.objects.select_related("channel").filter(pk=pk).first()
    ),
    turn_off=services.report_unsubscribe,
    what=lambda sub: "the monthly energy report",
    note="Alerts are not affected.",
)
