"""Pages of the failures app (timeline, one failure, reliability); their CSV exports are in
api_urls.py."""

from django.urls import path

from webapp.failures import views

app_name = "failures"

urlpatterns = [
    path("failures/", views.timeline, name="timeline"),
    path("failures/reliability/", views.reliability_page, name="reliability"),
    path("failures/job/<int:job_id>/", views.job_failures, name="job"),
    path("failures/<int:failure_id>/", views.detail, name="detail"),
]
