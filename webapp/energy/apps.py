from django.apps import AppConfig


class EnergyConfig(AppConfig):
    name = "webapp.energy"
    label = "energy"
    verbose_name = "Energy and carbon"
