from django.apps import AppConfig


class FailuresConfig(AppConfig):
    name = "webapp.failures"
    label = "failures"
    verbose_name = "Failures"

    def ready(self) -> None:
        from webapp.core import metrics
        from webapp.failures import signals  # noqa: F401 (connects the receivers)
        from webapp.failures.metrics import FailuresCollector

        metrics.register(FailuresCollector)
