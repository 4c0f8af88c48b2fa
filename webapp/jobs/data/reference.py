"""The Acme / Philly / PAI reference curves and summary rows the characterization page shows.

Vigil must run without the project's shared folder, so the few CDFs the page overlays are
kept in a compact committed JSON (`reference_cdfs.json`). `reference_cdfs_build` makes it from
AcmeTrace's long CSV; `python -m webapp.jobs.data.reference [util_cdf_long.csv]` rewrites it,
and a test checks that the committed file still matches the shared data when it is present.
"""

from __future__ import annotations

import csv
import json
import sys
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
CDFS_JSON = HERE / "reference_cdfs.json"
SUMMARY_CSV = HERE / "cluster_summary.csv"
# Where the project keeps AcmeTrace beside the repository (the app never needs it at run time).
SHARED_ACMETRACE = HERE.parents[3] / "shared" / "acmetrace"

# Vigil metric -> the (source file, cluster, AcmeTrace metric) curves drawn beside it.
# Kalos SM activity is only in util_gpu_kalos_full.pkl; its GPU-util figure uses
# util_gpu_kalos.pkl (AcmeTrace README). Memory is FB_USED / 80 GiB in %.
CURVES: dict[str, list[tuple[str, str, str]]] = {
    "gpu_util": [
        ("util_gpu_seren.pkl", "Seren", "gpu_util"),
        ("util_gpu_kalos.pkl", "Kalos", "gpu_util"),
        ("util_gpu_philly.pkl", "Philly", "gpu_util"),
        ("util_gpu_pai.pkl", "PAI", "gpu_util"),
    ],
    "sm_active": [
        ("util_gpu_seren.pkl", "Seren", "sm_active"),
        ("util_gpu_kalos_full.pkl", "Kalos", "sm_active"),
    ],
    "mem_used": [
        ("util_gpu_seren.pkl", "Seren", "gpu_mem_used_of_80GiB"),
        ("util_gpu_kalos.pkl", "Kalos", "gpu_mem_used_of_80GiB"),
    ],
    "power_w": [
        ("gpu_power_seren.pkl", "Seren", "gpu_power"),
        ("gpu_power_kalos.pkl", "Kalos", "gpu_power"),
    ],
}
EVERY = 10  # keep every 10th of the 1,000 quantiles (1 % steps) ...


def _compact(points: list[tuple[float, float]]) -> list[list[float]]:
    """... plus both ends of every flat run, so the jumps of polarised curves stay exact."""
    if len(points) <= 200:  # short curves (PAI: 74 points) are kept whole
        return [[round(v, 3), round(p, 3)] for v, p in points]
    values = [v for v, _ in points]
    keep = []
    for i, (value, pct) in enumerate(points):
        prev_same = i > 0 and values[i - 1] == value
        next_same = i + 1 < len(values) and values[i + 1] == value
        if i % EVERY == 0 or i == len(points) - 1 or prev_same != next_same:
            keep.append([round(value, 3), round(pct, 3)])
    return keep


def reference_cdfs_build(long_csv: Path) -> dict:
    """{metric: [{"cluster", "source_file", "unit", "points": [[value, cdf_percent], ...]}]}."""
    wanted = {(f, c, m) for curves in CURVES.values() for f, c, m in curves}
    rows: dict[tuple[str, str, str], list[tuple[int, float, float, str]]] = {}
    with open(long_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["source_file"], row["cluster"], row["metric"])
            if key in wanted:
                rows.setdefault(key, []).append(
                    (
                        int(row["point_index"]),
                        float(row["value"]),
                        float(row["cdf_percent"]),
                        row["unit"],
                    )
                )
    out: dict[str, list[dict]] = {}
    for metric, curves in CURVES.items():
        out[metric] = []
        for key in curves:
            if key not in rows:
                raise ValueError(f"{long_csv}: no rows for {key}")
            pts = sorted(rows[key])
            out[metric].append(
                {
                    "cluster": key[1],
                    "source_file": key[0],
                    "metric": key[2],
                    "unit": pts[0][3],
                    "points": _compact([(v, p) for _, v, p, _ in pts]),
                }
            )
    return out


def reference_cdfs_dump(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n"


@cache
def reference_cdfs() -> dict:
    """The committed reference curves (see reference_cdfs_build)."""
    return json.loads(CDFS_JSON.read_text())


@cache
def reference_summary_rows() -> list[dict[str, float | str | None]]:
    """The rows of AcmeTrace's cluster_summary.csv (Seren, Kalos, Philly, Helios, PAI)."""
    with open(SUMMARY_CSV, newline="") as fh:
        return [
            {k: (v if k == "id" else (float(v) if v != "" else None)) for k, v in row.items()}
            for row in csv.DictReader(fh)
        ]


def summary_columns() -> list[str]:
    with open(SUMMARY_CSV, newline="") as fh:
        return next(csv.reader(fh))


if __name__ == "__main__":
    source = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else SHARED_ACMETRACE / "derived" / "util_cdf_long.csv"
    )
    CDFS_JSON.write_text(reference_cdfs_dump(reference_cdfs_build(source)))
    print(f"wrote {CDFS_JSON} ({CDFS_JSON.stat().st_size:,} bytes) from {source}")
