"""Pages that compose several apps."""

from django.urls import path

from webapp.pages import views

app_name = "pages"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("nodes/<int:node_id>/", views.node, name="node"),
]
