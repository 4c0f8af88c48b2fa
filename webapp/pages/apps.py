from django.apps import AppConfig


class PagesConfig(AppConfig):
    name = "webapp.pages"
    label = "pages"
    verbose_name = "Composite pages"
