"""Pages of the failures app (timeline, one failure, reliability) and their CSV exports."""

from django.urls import path

from webapp.failures import views

app_name = "failures"

urlpatterns = [
    path("failures/", views.timeline, name="timeline"),
    path("failures/export.csv", views.timeline_csv, name="timeline_csv"),
    path("failures/reliability/", views.reliability_page, name="reliability"),
    path("failures/reliability/<slug:table>.csv", views.reliability_csv, name="reliability_csv"),
    path("failures/job/<int:job_id>/", views.job_failures, name="job"),
    path("failures/<int:failure_id>/", views.detail, name="detail"),
    path(
        "failures/<int:failure_id>/evidence.csv",
        views.detail_evidence_csv,
        name="detail_evidence_csv",
    ),
    path("failures/<int:failure_id>/gpu-errors.csv", views.detail_xids_csv, name="detail_xids_csv"),
]
