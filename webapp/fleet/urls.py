from django.urls import path

from webapp.fleet import views

app_name = "fleet"

urlpatterns = [
    path("clusters/<slug:cluster>/nodes/", views.nodes, name="nodes"),
    path("clusters/<slug:cluster>/nodes.csv", views.nodes_csv, name="nodes_csv"),
]
