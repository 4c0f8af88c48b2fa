from django.apps import AppConfig


class EnergyConfig(AppConfig):
    name = "webapp.energy"
    label = "energy"
    verbose_name = "Energy and carbon"

    def ready(self) -> None:
        from webapp.core import metrics
        from webapp.energy import signals  # noqa: F401 (connects the receivers)
        from webapp.energy.metrics import EnergyCollector

        metrics.register(EnergyCollector)
