"""CSV exports of the evaluation app, mounted under /api/v1/."""

from django.urls import path

from webapp.evaluation import views

app_name = "evaluation_api"

urlpatterns = [
    path("evaluation/runs.csv", views.runs_csv, name="runs_csv"),
    path("evaluation/runs/<int:run_id>/jobs.csv", views.jobs_csv, name="jobs_csv"),
    path("evaluation/runs/<int:run_id>/plan.csv", views.plan_csv, name="plan_csv"),
    path("evaluation/estimates.csv", views.estimates_csv, name="estimates_csv"),
    path(
        "evaluation/characterization.csv",
        views.characterization_csv,
        name="characterization_csv",
    ),
]
