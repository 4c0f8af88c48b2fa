"""JSON of the pages that compose several apps, mounted under /api/v1/."""

from django.urls import path

from webapp.pages import views

app_name = "pages_api"

urlpatterns = [
    path("overview.json", views.overview_json, name="overview_json"),
]
