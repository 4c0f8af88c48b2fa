"""JSON API of the jobs app, mounted under /api/v1/."""

from django.urls import path  # noqa: F401

app_name = "jobs_api"

urlpatterns: list = []
