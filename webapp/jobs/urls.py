"""Pages of the jobs app (characterization, job list and page, wasted GPUs); their CSV exports
are in api_urls.py."""

from django.urls import path

from webapp.jobs import views

app_name = "jobs"

urlpatterns = [
    path("jobs/", views.job_list, name="list"),
    path("jobs/<int:job_id>/", views.job_detail, name="detail"),
    path("jobs/id/<str:scheduler_id>/", views.job_by_scheduler_id, name="by_scheduler_id"),
    path("jobs/characterization/", views.characterization, name="characterization"),
    path("jobs/wasted/", views.wasted, name="wasted"),
]
