from django.apps import AppConfig


class PagesConfig(AppConfig):
    name = "webapp.pages"
    label = "pages"
    verbose_name = "Pages composing several apps"

    def ready(self) -> None:
        from webapp.pages import job_incident  # noqa: F401 (answers the job page's timeline)
