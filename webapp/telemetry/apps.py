from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "webapp.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from webapp.core import ingest, metrics
        from webapp.telemetry.metrics import FleetCollector
        from webapp.telemetry.partitions import known_forget

        ingest.on_db_lost(known_forget)
        metrics.register(FleetCollector)
