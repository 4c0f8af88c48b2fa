"""Pages of the telemetry app (fleet overview, cluster nodes, node, GPU); their JSON and CSV are
in api_urls.py."""

from django.urls import path

from webapp.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("clusters/<slug:cluster>/nodes/", views.nodes, name="nodes"),
    path("gpus/<int:gpu_id>/", views.gpu, name="gpu"),
]
