"""JSON and CSV of the jobs app, mounted under /api/v1/: the job-events POST of the collectors
and the CSV exports of the jobs pages."""

from django.urls import path

from webapp.jobs import api, views

app_name = "jobs_api"

urlpatterns = [
    path("job-events", api.job_events, name="job_events"),
    path("jobs.csv", views.job_list_csv, name="list_csv"),
    path(
        "jobs/characterization/<slug:name>.csv",
        views.characterization_csv,
        name="characterization_csv",
    ),
    path("jobs/wasted.csv", views.wasted_csv, name="wasted_csv"),
    path("jobs/<int:job_id>/<slug:name>.csv", views.job_detail_csv, name="detail_csv"),
]
