"""Parse hourly grid-intensity CSV files (no Django): Electricity Maps exports first.

Electricity Maps' data portal ships one CSV per zone and year. Two header generations exist:

    Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),
    Carbon Intensity gCO₂eq/kWh (LCA),Low Carbon Percentage,Renewable Percentage,
    Data Source,Data Estimated,Data Estimation Method                       (2021-2023 files)

    Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),
    Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%),
    Renewable energy percentage (RE%),Data source,Data estimated,Data estimation method

(fields as listed on electricitymaps.com/data-portal; rows like
`2021-01-01 00:00:00,Sweden,Sweden,SE,2.54,30.02,...`). Columns are found by name, so both
parse. A plain format `hour_utc,zone,g_per_kwh` is accepted for other sources.

The whole file is checked before anything is returned: one bad line refuses the file, with
the line number and the problem.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

# Header names, lower-cased (the two Electricity Maps generations differ in case and wording).
_EM_DATETIME = "datetime (utc)"
_EM_ZONE = "zone id"
_EM_LCA = ("carbon intensity gco₂eq/kwh (lca)", "carbon intensity gco₂eq/kwh (life cycle)")
_EM_DIRECT = ("carbon intensity gco₂eq/kwh (direct)",)
_PLAIN = ("hour_utc", "zone", "g_per_kwh")
# Electricity Maps' highest yearly zone averages are near 900 g/kWh (coal-only grids); lignite
# plants' life-cycle factor is about 1,100 (IPCC AR5 WG3 Annex III). 2,000 catches unit mix-ups
# (kg/MWh is the same number; lb/MWh is 2.2x; g/MJ would be far off).
MAX_G_PER_KWH = 2000.0


class IntensityCsvError(ValueError):
    """A file that cannot be imported; the message names the line and the problem."""


@dataclass(frozen=True)
class ParsedSeries:
    zone: str
    file_format: str  # "electricitymaps" | "plain"
    basis: str  # "lca" | "direct"
    rows: tuple[tuple[datetime, float], ...]  # (hour start UTC, g/kWh), sorted


def _find(header: list[str], names: Iterable[str]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    return None


def _parse_hour(text: str, line: int) -> datetime:
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise IntensityCsvError(f"line {line}: bad datetime {text!r}") from None
    # The column is UTC by name; an explicit offset is honoured.
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    if t.minute or t.second or t.microsecond:
        raise IntensityCsvError(f"line {line}: {text!r} is not on the hour (hourly files only)")
    return t


def _parse_value(text: str, line: int) -> float:
    try:
        v = float(text)
    except ValueError:
        raise IntensityCsvError(f"line {line}: bad intensity {text!r} (g CO2e/kWh)") from None
    if not 0 <= v <= MAX_G_PER_KWH:
        raise IntensityCsvError(
            f"line {line}: intensity {v} g/kWh is outside 0-{MAX_G_PER_KWH:g} (wrong unit?)"
        )
    return v


def parse_intensity_csv(
    lines: Iterable[str], zone: str | None = None, basis: str = "lca"
) -> ParsedSeries:
    """Parse a whole file. `zone` picks one zone of a multi-zone file (and must match a
    single-zone one); `basis` picks the life-cycle ("lca") or direct column."""
    if basis not in ("lca", "direct"):
        raise IntensityCsvError(f"basis must be lca or direct, got {basis!r}")
    reader = csv.reader(lines)
    header = next(reader, None)
    if not header:
        raise IntensityCsvError("empty file")
    header[0] = header[0].lstrip("\ufeff")  # a BOM from spreadsheet exports
    t_col = _find(header, (_EM_DATETIME,))
    if t_col is not None:
        file_format = "electricitymaps"
        z_col = _find(header, (_EM_ZONE,))
        v_col = _find(header, _EM_LCA if basis == "lca" else _EM_DIRECT)
        wanted = f"'{_EM_ZONE}' and the {basis} carbon intensity column"
    else:
        file_format = "plain"
        t_col, z_col, v_col = (_find(header, (n,)) for n in _PLAIN)
        wanted = ",".join(_PLAIN)
    if t_col is None or z_col is None or v_col is None:
        raise IntensityCsvError(
            f"header not recognised: expected an Electricity Maps export (Datetime (UTC), "
            f"Zone Id, Carbon Intensity gCO₂eq/kWh (LCA) or (direct)) or {','.join(_PLAIN)}; "
            f"missing {wanted}; got {','.join(header)}"
        )
    want = zone.strip().upper() if zone else None
    rows: dict[datetime, float] = {}
    zones: set[str] = set()
    width = max(t_col, z_col, v_col) + 1
    for n, rec in enumerate(reader, start=2):
        if not rec or not any(f.strip() for f in rec):
            continue
        if len(rec) < width:
            raise IntensityCsvError(f"line {n}: {len(rec)} fields, expected at least {width}")
        row_zone = rec[z_col].strip().upper()
        if not row_zone:
            raise IntensityCsvError(f"line {n}: empty zone")
        if want and row_zone != want:
            continue
        zones.add(row_zone)
        if len(zones) > 1:
            raise IntensityCsvError(
                f"line {n}: several zones in the file ({', '.join(sorted(zones))}); "
                "pick one with --zone"
            )
        hour = _parse_hour(rec[t_col], n)
        if hour in rows:
            raise IntensityCsvError(f"line {n}: hour {hour:%Y-%m-%d %H:00} appears twice")
        rows[hour] = _parse_value(rec[v_col], n)
    if not rows:
        raise IntensityCsvError(f"no rows for zone {want}" if want else "no data rows")
    return ParsedSeries(zones.pop(), file_format, basis, tuple(sorted(rows.items())))
