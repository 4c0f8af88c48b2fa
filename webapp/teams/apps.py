from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "webapp.teams"
    label = "teams"
    verbose_name = "Teams"
