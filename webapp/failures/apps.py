from django.apps import AppConfig


class FailuresConfig(AppConfig):
    name = "webapp.failures"
    label = "failures"
    verbose_name = "Failures"
