"""Pages of the recovery app (a cluster's recovery, approvals, nodes out of service, one
action's audit) and the operators' POST endpoints; CSV exports are in api_urls.py."""

from django.urls import path

from webapp.recovery import views

app_name = "recovery"

urlpatterns = [
    path("recovery/", views.recovery_page, name="cluster"),
    path("recovery/policy/", views.policy_set, name="policy_set"),
    path("recovery/approvals/", views.approvals, name="approvals"),
    path("recovery/nodes/", views.nodes, name="nodes"),
    path("recovery/nodes/<int:node_id>/return/", views.node_return, name="node_return"),
    path("recovery/actions/<int:action_id>/", views.action_detail, name="action"),
    path("recovery/actions/<int:action_id>/approve/", views.action_approve, name="approve"),
    path("recovery/actions/<int:action_id>/reject/", views.action_reject, name="reject"),
]
