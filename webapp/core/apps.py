from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app shares (core imports no app; apps plug into it)."""

    name = "webapp.core"
    label = "core"
    verbose_name = "Vigil core"

    def ready(self) -> None:
        from webapp.core import keyauth, metrics

        metrics.register(keyauth.UnauthenticatedCollector)
