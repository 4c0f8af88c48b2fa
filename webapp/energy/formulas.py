"""Carbon arithmetic: plain functions over plain numbers, no Django.

Every constant cites `docs/energy-carbon.md` (the "reference") and the source
it names. `METHOD_VERSION` is stamped on every figure built with these: bump it whenever a
constant or a formula here changes, so old and new report rows can be told apart.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

METHOD_VERSION = "carbon-2026.12-1"

# Our default when a site gives nothing: Uptime Institute 2023 survey average, as used by
# Carbontracker, experiment-impact-tracker and Cloud Carbon Footprint on-premises (reference §3).
DEFAULT_PUE = 1.58
DEFAULT_PUE_SOURCE = "default: Uptime Institute 2023 average (on-premises)"
# World fallback: IEA Global Energy & CO2 Status Report 2019, as CodeCarbon and Green
# Algorithms use it (reference §4; Carbontracker's 481 is not used).
WORLD_G_PER_KWH = 475.0
WORLD_SOURCE = "world:IEA 2019"

# Embodied carbon, BLOOM paper's assumptions (Luccioni et al., JMLR 2023; reference §5).
EMBODIED_SERVER_KG = 2500.0
EMBODIED_GPU_KG = 150.0
EMBODIED_LIFESPAN_YEARS = 6.0
HOURS_PER_YEAR = 8760.0  # a 365-day year

# Node power model (reference §2).
# Acme's A100 servers: GPUs about 2/3 of server power, so server = 1.5 x GPU power when nothing
# else is known (the reference's approximation).
SERVER_PER_GPU_POWER = 1.5
# CPU: TDP x (0.1 + 0.9 x load^3) (CodeCarbon's CPU load model).
CPU_IDLE_SHARE = 0.1
# Memory: 0.375 W per GB (CodeCarbon v2).
MEMORY_W_PER_GB = 0.375
# PSU conversion losses: 9.6% of server power on Acme's A100 servers (reported).
PSU_LOSS_SHARE = 0.096

GRID_TABLE = Path(__file__).resolve().parent / "data" / "grid_intensity.csv"
GRID_COLUMNS = ("zone", "iso3", "name", "g_per_kwh", "year", "source")


def co2e_kg(facility_kwh: float, g_per_kwh: float) -> float:
    """Operational CO2e: facility energy x grid intensity (g/kWh = kg/MWh)."""
    return facility_kwh * g_per_kwh / 1000.0


def facility_kwh(it_kwh: float, pue: float) -> float:
    """Facility energy = IT energy x PUE (reference §3)."""
    return it_kwh * pue


def embodied_kg(
    gpu_hours: float,
    gpus_per_server: int,
    server_kg: float = EMBODIED_SERVER_KG,
    gpu_kg: float = EMBODIED_GPU_KG,
    lifespan_years: float = EMBODIED_LIFESPAN_YEARS,
    utilisation: float = 1.0,
) -> float:
    """SCI amortisation M = TE x (TR / EL) x (RR / TotalR), per GPU-hour reserved.

    Each GPU carries its own embodied carbon plus its share of the server's. `utilisation`
    spreads the hardware over the hours it is actually in use (the BLOOM paper assumed 0.85);
    1.0 is plain SCI.
    """
    if gpus_per_server < 1:
        raise ValueError(f"gpus_per_server must be at least 1, got {gpus_per_server}")
    if not 0 < utilisation <= 1:
        raise ValueError(f"utilisation must be in (0, 1], got {utilisation}")
    if lifespan_years <= 0:
        raise ValueError(f"lifespan_years must be positive, got {lifespan_years}")
    per_gpu_kg = server_kg / gpus_per_server + gpu_kg
    return per_gpu_kg * gpu_hours / (lifespan_years * HOURS_PER_YEAR * utilisation)


def node_power_model_w(
    gpu_power_w: float,
    cpu_util: float | None = None,
    *,
    cpu_tdp_w: float | None = None,
    cpu_sockets: int = 2,
    memory_gb: float | None = None,
    other_w: float = 0.0,
    psu_loss_share: float = PSU_LOSS_SHARE,
) -> float:
    """Estimated whole-server power (W) when the server's own power is not measured.

    With a CPU TDP: GPUs + CPUs (TDP x (0.1 + 0.9 x load^3) per socket, CodeCarbon) + memory
    (0.375 W/GB, CodeCarbon v2) + other, grossed up for PSU losses (9.6%, Acme). Without one:
    1.5 x GPU power (reference §2). `cpu_util` is a percentage (0-100) as in the node row;
    unknown counts as full load, an upper bound.
    """
    if gpu_power_w < 0:
        raise ValueError(f"gpu_power_w must not be negative, got {gpu_power_w}")
    if cpu_tdp_w is None:
        return SERVER_PER_GPU_POWER * gpu_power_w
    load = 1.0 if cpu_util is None else min(max(cpu_util / 100.0, 0.0), 1.0)
    cpu_w = cpu_sockets * cpu_tdp_w * (CPU_IDLE_SHARE + (1 - CPU_IDLE_SHARE) * load**3)
    mem_w = (memory_gb or 0.0) * MEMORY_W_PER_GB
    return (gpu_power_w + cpu_w + mem_w + other_w) / (1 - psu_loss_share)


@dataclass(frozen=True)
class GridRow:
    zone: str
    name: str
    g_per_kwh: float
    year: int | None
    source: str

    @property
    def label(self) -> str:
        """As an hour's source says it: `yearly:<source> <year>`."""
        return f"yearly:{self.source} {self.year}" if self.year else f"yearly:{self.source}"


def parse_grid_table(lines: Iterable[str]) -> dict[str, list[GridRow]]:
    """zone -> its rows, preferred first (file order: OWID/Ember, ENTSO-E, then references)."""
    reader = csv.DictReader(lines)
    if tuple(reader.fieldnames or ()) != GRID_COLUMNS:
        raise ValueError(f"grid table header must be {','.join(GRID_COLUMNS)}")
    table: dict[str, list[GridRow]] = {}
    for n, r in enumerate(reader, start=2):
        try:
            row = GridRow(
                zone=r["zone"].strip().upper(),
                name=r["name"],
                g_per_kwh=float(r["g_per_kwh"]),
                year=int(r["year"]) if r["year"] else None,
                source=r["source"],
            )
        except ValueError as e:
            raise ValueError(f"grid table line {n}: {e}") from None
        if not row.zone or not row.source or row.g_per_kwh < 0:
            raise ValueError(f"grid table line {n}: zone, source and a value >= 0 are needed")
        table.setdefault(row.zone, []).append(row)
    return table


def yearly_row(table: dict[str, list[GridRow]], zone: str) -> GridRow | None:
    """The zone's preferred yearly row, else its country's (the zone id up to the first '-':
    Electricity Maps names sub-national zones "US-CAL-CISO", "SE-SE3"), else None."""
    zone = zone.strip().upper()
    for key in (zone, zone.split("-", 1)[0]):
        if key and table.get(key):
            return table[key][0]
    return None
