"""Pages of the telemetry app (a cluster's nodes, a GPU); their CSV is
in api_urls.py."""

from django.urls import path

from webapp.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("clusters/<slug:cluster>/nodes/", views.nodes, name="nodes"),
    path("gpus/<int:gpu_id>/", views.gpu, name="gpu"),
]
