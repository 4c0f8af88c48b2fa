from django.urls import path

from webapp.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("clusters.csv", views.overview_csv, name="overview_csv"),
    path("api/v1/overview.json", views.overview_json, name="overview_json"),
    path("clusters/<slug:cluster>/nodes/", views.nodes, name="nodes"),
    path("clusters/<slug:cluster>/nodes.csv", views.nodes_csv, name="nodes_csv"),
    path("nodes/<int:node_id>/", views.node, name="node"),
    path("nodes/<int:node_id>/gpus.csv", views.node_csv, name="node_csv"),
    path("gpus/<int:gpu_id>/", views.gpu, name="gpu"),
    path("gpus/<int:gpu_id>/series.csv", views.gpu_csv, name="gpu_csv"),
]
