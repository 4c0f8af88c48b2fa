"""Pages of the energy app: a cluster's energy per month, the printable monthly report and its PDF;
the request for the daily CSV export (built by a task; its download is in api_urls.py); the report
email's unsubscribe link. CSV exports are in api_urls.py."""

from django.urls import path

from webapp.core import views as core_views
from webapp.energy import views

app_name = "energy"

urlpatterns = [
    path("energy/", views.energy_page, name="cluster"),
    path("energy/report/", views.report_page, name="report"),
    path("energy/report.pdf", views.report_pdf, name="report_pdf"),
    path("energy/exports/", views.export_create, name="export_create"),
    path(
        "energy/unsubscribe/<str:token>/",
        core_views.unsubscribe,
        {"page": views.UNSUBSCRIBE_PAGE},
        name="unsubscribe",
    ),
]
