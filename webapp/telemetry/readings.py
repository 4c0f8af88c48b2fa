"""A GPU's latest sample as a person reads it: each metric under a plain name, in its group, with
its unit, and the clock event reason bits decoded.

The field names stay visible beside the names (DCGM users know them), but a value never
reaches the page as a raw bitmask or a bare unit letter.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.schema import GPU_FIELDS, Metric
from webapp.core.units import GIB, mj_to_kwh

# nvmlClocksEventReason* bits, in NVML's order (docs/telemetry.md section 2).
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GPU idle"),
    (0x2, "application clocks setting"),
    (0x4, "software power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "software thermal slowdown"),
    (0x40, "hardware thermal slowdown"),
    (0x80, "hardware power brake"),
    (0x100, "display clock setting"),
    (0x200, "board limit"),
    (0x400, "reliability"),
)

# (group, [(field, name)]): every GPU field once, in the order an engineer reads a GPU.
GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Activity",
        (
            ("gpu_util", "GPU utilization"),
            ("sm_active", "SM activity"),
            ("sm_occupancy", "SM occupancy"),
            ("tensor_active", "Tensor core activity"),
            ("dram_active", "DRAM activity"),
            ("mem_copy_util", "Memory controller utilization"),
            ("pstate", "Performance state"),
        ),
    ),
    ("Memory", (("fb_used_bytes", "Memory used"), ("fb_total_bytes", "Memory total"))),
    (
        "Power and energy",
        (
            ("power_w", "Power draw"),
            ("power_limit_w", "Power limit"),
            ("energy_mj", "Energy since driver load"),
        ),
    ),
    (
        "Temperature and clocks",
        (
            ("gpu_temp_c", "Core temperature"),
            ("mem_temp_c", "Memory (HBM) temperature"),
            ("sm_clock_mhz", "SM clock"),
            ("mem_clock_mhz", "Memory clock"),
            ("clocks_event_reasons", "Clock event reasons"),
        ),
    ),
    (
        "ECC and row remapping",
        (
            ("ecc_sbe_vol", "Single-bit ECC errors, since boot"),
            ("ecc_dbe_vol", "Double-bit ECC errors, since boot"),
            ("ecc_sbe_agg", "Single-bit ECC errors, lifetime"),
            ("ecc_dbe_agg", "Double-bit ECC errors, lifetime"),
            ("remap_corr", "Rows remapped, correctable"),
            ("remap_unc", "Rows remapped, uncorrectable"),
            ("remap_pending", "Row remap pending (needs a GPU reset)"),
            ("remap_failure", "Row remap failed (RMA candidate)"),
        ),
    ),
    (
        "NVLink",
        (
            ("nvlink_crc_flit", "CRC flit errors"),
            ("nvlink_crc_data", "CRC data errors"),
            ("nvlink_replay", "Replays"),
            ("nvlink_recovery", "Recoveries"),
        ),
    ),
    (
        "PCIe",
        (
            ("pcie_gen", "Link generation"),
            ("pcie_width", "Link width"),
            ("pcie_tx_bytes_s", "Transmit"),
            ("pcie_rx_bytes_s", "Receive"),
            ("pcie_replay", "Replays"),
        ),
    ),
)

_METRICS = {m.name: m for m in GPU_FIELDS}


def clock_events_decode(mask: int) -> list[str]:
    """The reasons set in a clocks_event_reasons mask; unknown bits are named by value."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in CLOCK_EVENT_REASONS)
    if rest:
        names.append(f"other (0x{rest:x})")
    return names


def reading_text(metric: Metric, value: float | None, model: str) -> str:
    """A latest value for people: units, grouping; NULL means the GPU does not support it."""
    if value is None:
        return f"n/a (not supported on {model or 'this model'})"
    name, unit = metric.name, metric.unit
    if name == "pstate":
        return f"P{int(value)}"
    if name == "pcie_gen":
        return f"Gen {int(value)}"
    if name == "pcie_width":
        return f"x{int(value)}"
    if name == "clocks_event_reasons":
        reasons = clock_events_decode(int(value))
        return ", ".join(reasons) if reasons else "none (full clocks)"
    if unit == "ratio":
        return f"{value * 100:.1f} %"
    if unit == "B":
        return f"{value / GIB:,.1f} GiB"
    if unit == "B/s":
        return f"{value / 1e6:,.1f} MB/s"
    if unit == "mJ":
        return f"{mj_to_kwh(value):,.3f} kWh"
    if unit == "flag":
        return "yes" if value else "no"
    if unit in ("count", "rows"):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:,.1f} {unit}"
    return f"{value:,} {unit}"


@dataclass(frozen=True)
class Reading:
    field: str
    name: str
    text: str
    description: str
    supported: bool


def readings_grouped(
    values: dict[str, float | None] | None, model: str
) -> list[tuple[str, list[Reading]]]:
    """The latest sample's values in GROUPS order; with no sample, every value says so."""
    out = []
    for group, fields in GROUPS:
        rows = []
        for field, name in fields:
            metric = _METRICS[field]
            value = values.get(field) if values is not None else None
            text = reading_text(metric, value, model) if values is not None else "no sample"
            rows.append(Reading(field, name, text, metric.description, value is not None))
        out.append((group, rows))
    return out
