from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "webapp.recovery"
    label = "recovery"
    verbose_name = "Recovery"

    def ready(self) -> None:
        from webapp.recovery import signals  # noqa: F401 (connects the receivers)
