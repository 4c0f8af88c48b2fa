"""Rebuild `grid_intensity.csv` from CodeCarbon's data files and the reference rows.

Run by hand when CodeCarbon ships newer OWID data (nothing imports this module):

    pip download codecarbon==3.3.2 --no-deps -d CC && unzip CC/*.whl -d CC/x
    pip download pycountry --no-deps -d PC && unzip PC/*.whl -d PC/x
    python webapp/energy/data/derive_grid_table.py CC/x/codecarbon/data PC/x/pycountry/databases

CodeCarbon is not a dependency: only its data files are read, here. pycountry maps OWID's
ISO 3166-1 alpha-3 codes to the alpha-2 codes that Electricity Maps uses as zone ids.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "grid_intensity.csv"
REFERENCE = HERE / "reference_rows.csv"
COLUMNS = ("zone", "iso3", "name", "g_per_kwh", "year", "source")
OWID = "OWID/Ember via CodeCarbon 3.3.2"
ENTSOE = "ENTSO-E A75 mix via CodeCarbon 3.3.2"


def main(codecarbon_data: Path, pycountry_db: Path) -> None:
    alpha2 = {
        c["alpha_3"]: c["alpha_2"]
        for c in json.loads((pycountry_db / "iso3166-1.json").read_text())["3166-1"]
    }
    mix = json.loads((codecarbon_data / "private_infra" / "global_energy_mix.json").read_text())
    rows = [
        {
            "zone": alpha2[iso3],
            "iso3": iso3,
            "name": c["country_name"],
            "g_per_kwh": c["carbon_intensity"],
            "year": c["year"],
            "source": OWID,
        }
        for iso3, c in sorted(mix.items())
        if iso3 in alpha2 and c.get("carbon_intensity") is not None
    ]
    nordic = json.loads((codecarbon_data / "private_infra" / "nordic_emissions.json").read_text())
    for zone, z in sorted(nordic["data"].items()):
        # Electricity Maps names bidding zones "SE-SE1", "NO-NO1"; Finland is one zone, "FI".
        em_zone = zone if len(zone) == 2 else f"{zone[:2]}-{zone}"
        rows.append(
            {
                "zone": em_zone,
                "iso3": "",
                "name": z["description"],
                "g_per_kwh": z["emission_factor"],
                "year": z["year"],
                "source": ENTSOE,
            }
        )
    with REFERENCE.open(newline="") as f:
        rows.extend(csv.DictReader(f))
    with OUT.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
