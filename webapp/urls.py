from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.core import health, metrics

handler404 = "webapp.core.pages.not_found"

# The admin says whose it is (Django's defaults read "Django administration").
admin.site.site_header = "Vigil administration"
admin.site.site_title = "Vigil admin"
admin.site.index_title = "What Vigil stores"

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("", include("webapp.telemetry.urls")),
    path("", include("webapp.jobs.urls")),
    path("", include("webapp.failures.urls")),
    path("", include("webapp.recovery.urls")),
    path("", include("webapp.alerts.urls")),
    path("", include("webapp.energy.urls")),
    path("", include("webapp.evaluation.urls")),
    path("", include("webapp.pages.urls")),
    # JSON and CSV: one prefix, one api_urls.py per app (namespaces <app>_api).
    path("api/v1/", include("webapp.telemetry.api_urls")),
    path("api/v1/", include("webapp.jobs.api_urls")),
    path("api/v1/", include("webapp.failures.api_urls")),
    path("api/v1/", include("webapp.recovery.api_urls")),
    path("api/v1/", include("webapp.alerts.api_urls")),
    path("api/v1/", include("webapp.energy.api_urls")),
    path("api/v1/", include("webapp.evaluation.api_urls")),
    path("api/v1/", include("webapp.pages.api_urls")),
]
