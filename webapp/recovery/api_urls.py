"""CSV exports of the recovery app, mounted under /api/v1/."""

from django.urls import path

from webapp.recovery import views

app_name = "recovery_api"

urlpatterns = [
    path("recovery/summary.csv", views.summary_csv, name="summary_csv"),
    path("recovery/actions-over-time.csv", views.over_time_csv, name="over_time_csv"),
    path("recovery/plans.csv", views.plans_csv, name="plans_csv"),
    path("recovery/actions.csv", views.actions_csv, name="actions_csv"),
    path("recovery/approvals.csv", views.approvals_csv, name="approvals_csv"),
    path("recovery/nodes.csv", views.nodes_csv, name="nodes_csv"),
    path(
        "recovery/actions/<int:action_id>/steps.csv",
        views.action_steps_csv,
        name="action_steps_csv",
    ),
    path(
        "recovery/failures/<int:failure_id>/timeline.csv",
        views.failure_timeline_csv,
        name="failure_timeline_csv",
    ),
]
