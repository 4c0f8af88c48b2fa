"""CSV exports of the alerts app, mounted under /api/v1/."""

from django.urls import path

from webapp.alerts import views

app_name = "alerts_api"

urlpatterns = [
    path("alerts.csv", views.alert_list_csv, name="list_csv"),
    path("alerts/silences.csv", views.silence_list_csv, name="silences_csv"),
    path("alerts/channels.csv", views.channel_list_csv, name="channels_csv"),
    path("alerts/subscriptions.csv", views.subscription_list_csv, name="subscriptions_csv"),
    path("alerts/deliveries.csv", views.delivery_list_csv, name="deliveries_csv"),
    path("alerts/outbox.csv", views.outbox_csv, name="outbox_csv"),
]
