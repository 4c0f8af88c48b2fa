"""JSON API of the jobs app, mounted under /api/v1/."""

from django.urls import path

from webapp.jobs import api

app_name = "jobs_api"

urlpatterns = [
    path("job-events", api.job_events, name="job_events"),
]
