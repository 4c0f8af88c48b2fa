"""CSV exports of the energy page's tables, mounted under /api/v1/."""

from django.urls import path

from webapp.energy import views

app_name = "energy_api"

urlpatterns = [
    path("energy/<slug:table>.csv", views.energy_csv, name="csv"),
]
