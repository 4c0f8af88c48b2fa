"""CSV exports of the failures app, mounted under /api/v1/."""

from django.urls import path

from webapp.failures import views

app_name = "failures_api"

urlpatterns = [
    path("failures.csv", views.timeline_csv, name="timeline_csv"),
    path("failures/reliability/<slug:table>.csv", views.reliability_csv, name="reliability_csv"),
    path(
        "failures/<int:failure_id>/evidence.csv",
        views.detail_evidence_csv,
        name="detail_evidence_csv",
    ),
    path("failures/<int:failure_id>/gpu-errors.csv", views.detail_xids_csv, name="detail_xids_csv"),
]
