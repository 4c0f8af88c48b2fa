"""Pages of the jobs app (characterization, job page, wasted GPUs)."""

from django.urls import path  # noqa: F401

app_name = "jobs"

urlpatterns: list = []
