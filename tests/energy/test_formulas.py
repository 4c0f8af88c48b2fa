"""Carbon arithmetic without Django: the published reference cases reproduced by the formulas
the report uses, the embodied and node power models, and the shipped grid table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from webapp.energy import formulas as f

CASES = {
    c["name"]: c
    for c in json.loads((Path(__file__).parent / "reference_cases.json").read_text())["cases"]
}


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def gpu_kwh(case: dict) -> float:
    return case["gpu_hours"] * case["gpu_power_w"] / 1000.0


@pytest.mark.parametrize("name", ["Llama 2 70B", "Llama 3.1 405B", "Llama 3.1, all models"])
def test_meta_model_cards_are_reproduced(name):
    case = CASES[name]
    facility = f.facility_kwh(gpu_kwh(case), case["pue"])
    assert rel(facility / 1000, case["published_mwh"]) < case["tolerance"]
    co2e_t = f.co2e_kg(facility, case["g_per_kwh_implied"]) / 1000
    assert rel(co2e_t, case["published_co2e_t"]) < case["tolerance"]


def test_meta_used_one_grid_factor_near_the_us_average():
    """The implied factors of the three Meta cases agree (one US factor), and sit within 3% of
    the Green Algorithms US row of our table: a wrong table row or a wrong case would show."""
    implied = [CASES[n]["g_per_kwh_implied"] for n in ("Llama 3.1 405B", "Llama 3.1, all models")]
    assert rel(implied[0], implied[1]) < 0.002
    us = [r for r in load_table()["US"] if r.source.startswith("Green Algorithms")][0]
    for name in ("Llama 2 70B", "Llama 3.1 405B", "Llama 3.1, all models"):
        assert rel(CASES[name]["g_per_kwh_implied"], us.g_per_kwh) < 0.03


def test_llama_31_market_based_is_zero_with_a_zero_contract_factor():
    case = CASES["Llama 3.1, all models"]
    market_kg = gpu_kwh(case) * case["market_kg_per_kwh"]
    assert market_kg == case["published_market_co2e_t"] == 0
    # ... while location-based is not: the two must be shown side by side.
    assert f.co2e_kg(gpu_kwh(case), case["g_per_kwh_implied"]) > 11_000_000


def test_bloom_dynamic_idle_embodied_and_total():
    case = CASES["BLOOM 176B"]
    tol = case["tolerance"]
    dynamic_kwh = gpu_kwh(case)
    assert dynamic_kwh == pytest.approx(case["published_dynamic_kwh"], abs=1)
    dynamic_t = f.co2e_kg(dynamic_kwh, case["g_per_kwh"]) / 1000
    idle_t = f.co2e_kg(case["idle_infrastructure_kwh"], case["g_per_kwh"]) / 1000
    embodied_t = (
        f.embodied_kg(
            case["gpu_hours"],
            case["gpus_per_server"],
            server_kg=case["embodied_server_kg"],
            gpu_kg=case["embodied_gpu_kg"],
            lifespan_years=case["lifespan_years"],
            utilisation=case["utilisation"],
        )
        / 1000
    )
    assert rel(dynamic_t, case["published_dynamic_co2e_t"]) < tol
    assert rel(idle_t, case["published_idle_infrastructure_co2e_t"]) < tol
    assert rel(embodied_t, case["published_embodied_t"]) < tol
    assert rel(dynamic_t + idle_t + embodied_t, case["published_total_t"]) < tol
    # The paper found embodied about 22% of its total.
    assert 0.20 < embodied_t / (dynamic_t + idle_t + embodied_t) < 0.24


def test_embodied_defaults_are_blooms_and_scale_with_the_share_reserved():
    # One 8-GPU server reserved for its whole 6-year life carries all of its embodied carbon.
    whole_life = 8 * f.EMBODIED_LIFESPAN_YEARS * f.HOURS_PER_YEAR
    assert f.embodied_kg(whole_life, 8) == pytest.approx(2500 + 8 * 150)
    # Half the GPUs for half the life: a quarter.
    assert f.embodied_kg(whole_life / 4, 8) == pytest.approx((2500 + 8 * 150) / 4)
    with pytest.raises(ValueError, match="gpus_per_server"):
        f.embodied_kg(10, 0)
    with pytest.raises(ValueError, match="utilisation"):
        f.embodied_kg(10, 8, utilisation=0)


def test_co2e_units():
    # 1 MWh at 475 g/kWh (world fallback) is 475 kg.
    assert f.co2e_kg(1000, f.WORLD_G_PER_KWH) == pytest.approx(475)
    assert f.facility_kwh(100, f.DEFAULT_PUE) == pytest.approx(158)


def test_node_power_model():
    # Nothing known but the GPUs: server = 1.5 x GPU power (Acme: GPUs about 2/3).
    assert f.node_power_model_w(8 * 400) == pytest.approx(4800)
    # A profile: 2 x 270 W sockets idle (10% of TDP), 1 TB at 0.375 W/GB, 100 W other, 9.6%
    # PSU losses.
    idle = f.node_power_model_w(
        8 * 60, 0, cpu_tdp_w=270, cpu_sockets=2, memory_gb=1024, other_w=100
    )
    assert idle == pytest.approx((480 + 54 + 384 + 100) / 0.904)
    busy = f.node_power_model_w(
        8 * 60, 100, cpu_tdp_w=270, cpu_sockets=2, memory_gb=1024, other_w=100
    )
    assert busy - idle == pytest.approx(2 * 270 * 0.9 / 0.904)
    # Unknown CPU load is counted as full load (an upper bound).
    assert f.node_power_model_w(480, None, cpu_tdp_w=270, memory_gb=1024, other_w=100) == busy
    with pytest.raises(ValueError, match="gpu_power_w"):
        f.node_power_model_w(-1)


def load_table() -> dict[str, list[f.GridRow]]:
    with f.GRID_TABLE.open(newline="", encoding="utf-8") as fh:
        return f.parse_grid_table(fh)


def test_shipped_table_has_the_reference_rows_with_source_and_year():
    t = load_table()
    # energy-carbon.md's OWID column, as the first (preferred) row of each zone.
    for zone, value in (("CN", 582.3), ("US", 369.5), ("FR", 56.0)):
        row = t[zone][0]
        assert row.g_per_kwh == pytest.approx(value, abs=0.05)
        assert row.source.startswith("OWID/Ember") and row.year in (2022, 2023)
    ga = {z: r.g_per_kwh for z, rows in t.items() for r in rows if r.source.startswith("Green")}
    assert ga["US-CA"] == 216.43 and ga["DE"] == 338.66 and ga["IN"] == 708.2
    # The countries the reference does not cover come from OWID, each with its year.
    for zone in ("JP", "SG", "KR", "TW", "IE", "NL", "DK", "ES", "IT", "PL", "AU", "BR", "AE"):
        row = t[zone][0]
        assert row.source.startswith("OWID/Ember") and row.year and 0 < row.g_per_kwh < 1000
    assert all(r.source for rows in t.values() for r in rows)


def test_yearly_row_falls_back_to_the_country_of_a_sub_national_zone():
    t = load_table()
    assert f.yearly_row(t, "us-cal-ciso") == t["US"][0]
    assert f.yearly_row(t, "SE-SE3").source.startswith("ENTSO-E")
    assert f.yearly_row(t, "XX-NOWHERE") is None
    assert t["FR"][0].label == "yearly:OWID/Ember via CodeCarbon 3.3.2 2023"


def test_a_broken_grid_table_is_refused_with_its_line():
    header = ",".join(f.GRID_COLUMNS)
    with pytest.raises(ValueError, match="line 3"):
        f.parse_grid_table(
            io.StringIO(f"{header}\nFR,FRA,France,56,2023,OWID\nDE,DEU,Germany,lots,2023,OWID\n")
        )
    with pytest.raises(ValueError, match="header"):
        f.parse_grid_table(io.StringIO("zone,value\nFR,56\n"))
