from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    name = "webapp.evaluation"
    label = "evaluation"
    verbose_name = "Evaluation scheduling"

    def ready(self) -> None:
        from webapp.evaluation import phases  # noqa: F401 (answers the characterization's phases)
