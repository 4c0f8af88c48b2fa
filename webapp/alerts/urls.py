"""Pages of the alerts app; their CSV exports are in api_urls.py. The emails link to two of
these paths (emails.ALERTS_PATH, services.UNSUBSCRIBE_PATH): keep them."""

from django.urls import path

from webapp.alerts import views
from webapp.core import views as core_views

app_name = "alerts"

urlpatterns = [
    path("alerts/", views.alert_list, name="list"),
    path("alerts/silences/", views.silence_list, name="silences"),
    path("alerts/silences/<int:silence_id>/expire/", views.silence_expire, name="silence_expire"),
    path("alerts/channels/", views.channel_list, name="channels"),
    path("alerts/channels/<int:channel_id>/enable/", views.channel_enable, name="channel_enable"),
    path("alerts/subscriptions/", views.subscription_create, name="subscription_create"),
    path(
        "alerts/subscriptions/<int:subscription_id>/",
        views.subscription_edit,
        name="subscription",
    ),
    path(
        "alerts/subscriptions/<int:subscription_id>/delete/",
        views.subscription_delete,
        name="subscription_delete",
    ),
    path("alerts/deliveries/", views.delivery_list, name="deliveries"),
    path(
        "alerts/unsubscribe/<str:token>/",
        core_views.unsubscribe,
        {"page": views.UNSUBSCRIBE_PAGE},
        name="unsubscribe",
    ),
    path("alerts/outbox/", views.outbox, name="outbox"),
    path("alerts/outbox/<int:message_id>/", views.outbox_message, name="outbox_message"),
]
