"""CSV exports of the energy page's tables and the built daily CSVs, mounted under /api/v1/."""

from django.urls import path

from webapp.energy import views

app_name = "energy_api"

urlpatterns = [
    path("energy/<slug:table>.csv", views.energy_csv, name="csv"),
    # The daily CSV a worker built (energy_export rows), behind a login like every table.
    path("energy/exports/<int:pk>.csv", views.export_download, name="export_download"),
]
