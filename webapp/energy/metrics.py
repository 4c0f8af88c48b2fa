"""The energy app's families on `/metrics` (webapp/core/metrics.py): per cluster, the energy
the hourly rollup has accounted since it began, as counters.

- `vigil_energy_gpu_joules_total{cluster,method}`: GPU energy by method (counter,
  integrated, model);
- `vigil_energy_it_joules_total{cluster,method}`: node IT energy, `ipmi` or `model`;
- `vigil_energy_facility_joules_total{cluster}`: IT x the PUE valid each hour;
- `vigil_energy_co2e_kilograms_total{cluster,basis}`: facility energy x the hour's grid
  intensity (`location`) or the contractual factor (`market`).

They are the monthly report's arithmetic (selectors.energy_totals, hourly) over all hours, so
a month's increase matches its report. A scrape asks for the rollup's newest row id (one
index lookup); the totals are recomputed only when it moved (or after CACHE_S, for PUE and
intensity edits): two queries for all clusters (their rows per cluster and hour), then per
cluster its PUE periods, intensity and market factors. A recomputed
hour (late samples) can move a counter slightly either way; Prometheus treats a decrease as
a reset, so rates over it are off for one scrape.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.cache import cache
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from webapp.energy.selectors import energy_totals, rollup_newest_id

CACHE_KEY = "vigil:energy:metrics"
CACHE_S = 60  # a Prometheus scrape interval is typically 15-60 s; energy moves hourly


class EnergyCollector(Collector):
    def collect(self) -> Iterator:
        newest = rollup_newest_id()
        cached = cache.get(CACHE_KEY)
        if newest is None:
            totals = []
        elif cached is not None and cached[0] == newest:
            totals = cached[1]
        else:
            totals = energy_totals()
            cache.set(CACHE_KEY, (newest, totals), CACHE_S)
        gpu = CounterMetricFamily(
            "vigil_energy_gpu_joules",
            "GPU energy accounted by the hourly rollup, by method (counter: NVML energy counter"
            " deltas; integrated: power integrated; model: estimated from utilization)",
            labels=["cluster", "method"],
        )
        it = CounterMetricFamily(
            "vigil_energy_it_joules",
            "Node IT energy: IPMI server power where measured (ipmi), else the node power model",
            labels=["cluster", "method"],
        )
        facility = CounterMetricFamily(
            "vigil_energy_facility_joules",
            "Facility energy: IT energy x the PUE valid each hour",
            labels=["cluster"],
        )
        co2e = CounterMetricFamily(
            "vigil_energy_co2e_kilograms",
            "Operational CO2e of the facility energy: location-based (grid intensity of each"
            " hour) or market-based (contractual factor; location-based where none is set)",
            labels=["cluster", "basis"],
        )
        for t in totals:
            for method, j in t["gpu_j"].items():
                gpu.add_metric([t["cluster"], method], j)
            it.add_metric([t["cluster"], "ipmi"], t["ipmi_j"])
            it.add_metric([t["cluster"], "model"], t["model_j"])
            facility.add_metric([t["cluster"]], t["facility_j"])
            co2e.add_metric([t["cluster"], "location"], t["co2e_location_kg"])
            co2e.add_metric([t["cluster"], "market"], t["co2e_market_kg"])
        yield gpu
        yield it
        yield facility
        yield co2e
