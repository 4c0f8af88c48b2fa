"""A GPU's latest values as a person reads them (webapp/telemetry/readings.py)."""

from __future__ import annotations

import pytest

from collectors.schema import GPU_FIELD_NAMES, GPU_FIELDS
from webapp.telemetry.readings import GROUPS, clock_events_decode, reading_text

METRIC = {m.name: m for m in GPU_FIELDS}


def test_every_field_has_one_name_in_one_group():
    fields = [f for _, rows in GROUPS for f, _ in rows]
    assert sorted(fields) == sorted(GPU_FIELD_NAMES)


@pytest.mark.parametrize(
    ("mask", "reasons"),
    [
        (0x0, []),
        (0x1, ["GPU idle"]),
        (0x4 | 0x40, ["software power cap", "hardware thermal slowdown"]),
        (0x8 | 0x10000, ["hardware slowdown", "other (0x10000)"]),
    ],
)
def test_clock_event_reasons_are_decoded(mask, reasons):
    assert clock_events_decode(mask) == reasons


@pytest.mark.parametrize(
    ("field", "value", "text"),
    [
        ("pstate", 0, "P0"),
        ("pcie_gen", 4, "Gen 4"),
        ("pcie_width", 16, "x16"),
        ("clocks_event_reasons", 0, "none (full clocks)"),
        ("clocks_event_reasons", 0x20, "software thermal slowdown"),
        ("energy_mj", 3_600_000_000, "1.000 kWh"),
        ("ecc_sbe_agg", 12345, "12,345"),
        ("remap_pending", 1, "yes"),
        ("tensor_active", None, "n/a (not supported on A100)"),
    ],
)
def test_values_read_with_their_unit(field, value, text):
    assert reading_text(METRIC[field], value, "A100") == text
