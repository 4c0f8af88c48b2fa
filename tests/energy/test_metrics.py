"""/metrics gains per-cluster energy counters: they equal the report's figures of the same
hours (the rig's hours all lie in one month)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from webapp.energy.selectors import month_report


def _samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_metrics_count_facility_energy_and_co2e_per_cluster(client, built, settings):
    settings.VIGIL_METRICS_KEY = "scrape-key-123"
    r, _ = month_report(built["cluster"], built["month"])
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-key-123")
    m = _samples(response.content.decode())
    c = ("cluster", "watt")
    assert m[("vigil_energy_facility_joules_total", (c,))] == pytest.approx(
        r.facility_kwh * 3.6e6, rel=1e-9
    )
    assert m[("vigil_energy_co2e_kilograms_total", (("basis", "location"), c))] == pytest.approx(
        r.co2e_location_kg, rel=1e-9
    )
    assert m[("vigil_energy_co2e_kilograms_total", (("basis", "market"), c))] == pytest.approx(
        r.co2e_market_kg, rel=1e-9
    )
    gpu = {k[1][1][1]: v for k, v in m.items() if k[0] == "vigil_energy_gpu_joules_total"}
    assert sum(gpu.values()) == pytest.approx(r.gpu_kwh * 3.6e6, rel=1e-9)
    assert gpu["integrated"] == pytest.approx(r.gpu_kwh_by_method["integrated"] * 3.6e6)
    assert m[("vigil_energy_it_joules_total", (c, ("method", "ipmi")))] == pytest.approx(
        r.it_kwh_measured * 3.6e6, rel=1e-9
    )
