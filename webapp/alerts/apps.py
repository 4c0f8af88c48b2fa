from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "webapp.alerts"
    label = "alerts"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from webapp.alerts import signals  # noqa: F401 (connects the receivers)
        from webapp.alerts.metrics import AlertsCollector
        from webapp.core import metrics

        metrics.register(AlertsCollector)
