"""Pages of the evaluation app; CSV exports are in api_urls.py."""

from django.urls import path

from webapp.evaluation import views

app_name = "evaluation"

urlpatterns = [
    path("evaluation/", views.evaluation_page, name="page"),
    path("evaluation/request/", views.evaluation_submit, name="submit"),
]
