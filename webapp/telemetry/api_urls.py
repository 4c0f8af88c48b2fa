"""JSON and CSV of the telemetry app, mounted under /api/v1/."""

from django.urls import path

from webapp.telemetry import views

app_name = "telemetry_api"

urlpatterns = [
    path("clusters.csv", views.overview_csv, name="overview_csv"),
    path("clusters/<slug:cluster>/nodes.csv", views.nodes_csv, name="nodes_csv"),
    path("nodes/<int:node_id>/gpus.csv", views.node_csv, name="node_csv"),
    path("gpus/<int:gpu_id>/series.csv", views.gpu_csv, name="gpu_csv"),
]
