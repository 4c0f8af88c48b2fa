"""The alerts app's family on `/metrics` (webapp/core/metrics.py): alerts firing now."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webapp.alerts.selectors import alerts_firing_counts


class AlertsCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "vigil_alerts_firing",
            "Alerts firing now by rule and severity (silenced ones left out)",
            labels=["rule", "severity"],
        )
        for rule, severity, n in alerts_firing_counts():
            family.add_metric([rule, severity], n)
        yield family
