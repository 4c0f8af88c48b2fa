"""Pages of the jobs app (characterization, job list and page, wasted GPUs)."""

from django.urls import path

from webapp.jobs import views

app_name = "jobs"

urlpatterns = [
    path("jobs/", views.job_list, name="list"),
    path("jobs/export.csv", views.job_list_csv, name="list_csv"),
    path("jobs/<int:job_id>/", views.job_detail, name="detail"),
    path("jobs/characterization/", views.characterization, name="characterization"),
    path(
        "jobs/characterization/<slug:name>.csv",
        views.characterization_csv,
        name="characterization_csv",
    ),
    path("jobs/wasted/", views.wasted, name="wasted"),
    path("jobs/wasted/export.csv", views.wasted_csv, name="wasted_csv"),
]
