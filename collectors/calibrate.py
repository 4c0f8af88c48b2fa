"""Derive the simulator's calibration from AcmeTrace's published CDFs.

    python -m collectors.calibrate [--csv PATH] [--out collectors/data/acme_calibration.json]

Input: `acmetrace/derived/util_cdf_long.csv` (the project's CSV conversion of the CDF pickles
in InternLM/AcmeTrace; CC BY 4.0, Hu et al., NSDI '24). Each (cluster, metric) there is a CDF
of every (GPU or node) x 15-second sample. Output: for Seren and Kalos, each metric's quantiles
at fixed percentiles (inverse CDF, what the simulator samples from), plus the headline shares a
test can check the simulator against. The JSON is committed because collectors run on GPU
hosts where the shared AcmeTrace folder does not exist.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

# AcmeTrace's utilization CDFs (docs/acme-workload.md section 11), kept beside the repository.
DEFAULT_CSV = (
    Path(__file__).resolve().parent.parent.parent
    / "shared"
    / "acmetrace"
    / "derived"
    / "util_cdf_long.csv"
)
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "acme_calibration.json"

# Quantiles every 0.5 percentile: Acme's GPU-util CDF has 30% and 50% steps at 0 and 100, and
# a 0.5% grid reproduces those shares to within half a percent.
PERCENTILES = [i / 2 for i in range(201)]

# (source_file, metric in the CSV) -> our key, per cluster. Seren's file has both clusters'
# shapes for some metrics only; `BORROWED` fills Kalos from Seren where Kalos was not published.
SOURCES: dict[str, dict[str, tuple[str, str]]] = {
    "seren": {
        "gpu_util": ("util_gpu_seren.pkl", "gpu_util"),
        "gpu_power_w": ("gpu_power_seren.pkl", "gpu_power"),
        "sm_active_pct": ("util_gpu_seren.pkl", "sm_active"),
        "tensor_active_pct": ("util_gpu_seren.pkl", "tc_activity"),
        "fb_used_pct_of_80gib": ("util_gpu_seren.pkl", "gpu_mem_used_of_80GiB"),
        "gpu_temp_c": ("gpu_temp_seren.pkl", "gpu_temp"),
        "mem_temp_c": ("gpu_temp_seren.pkl", "gpu_mem_temp"),
        "node_cpu_util": ("util_cpu_mem_seren.pkl", "node_cpu_util"),
        "node_mem_util": ("util_cpu_mem_seren.pkl", "node_mem_util"),
        "ib_send_mb_s": ("ib_seren.pkl", "ib_send"),
        "ib_receive_mb_s": ("ib_seren.pkl", "ib_receive"),
        "server_power_w": ("server_power.pkl", "gpu_server_total_power"),
    },
    "kalos": {
        "gpu_util": ("util_gpu_kalos.pkl", "gpu_util"),
        "gpu_power_w": ("gpu_power_kalos.pkl", "gpu_power"),
        "sm_active_pct": ("util_gpu_kalos_full.pkl", "sm_active"),
        "tensor_active_pct": ("util_gpu_kalos_full.pkl", "tc_activity"),
        "fb_used_pct_of_80gib": ("util_gpu_kalos.pkl", "gpu_mem_used_of_80GiB"),
        "gpu_temp_c": ("gpu_temp_kalos.pkl", "gpu_temp"),
        "mem_temp_c": ("gpu_temp_kalos.pkl", "gpu_mem_temp"),
        "node_cpu_util": ("util_cpu_mem_kalos.pkl", "node_cpu_util"),
        "node_mem_util": ("util_cpu_mem_kalos.pkl", "node_mem_util"),
    },
}
BORROWED = {"kalos": ("seren", ("ib_send_mb_s", "ib_receive_mb_s", "server_power_w"))}
# Kalos CPU values reach 238.9 (AcmeTrace's README: unit unclear); the wire's cpu_util is a
# percent of all cores, so the simulator caps it at 100.
CAPS = {"node_cpu_util": 100.0}

# Thresholds for the headline shares. Idle power: an idle A100 SXM4 draws about 50-70 W.
IDLE_UTIL_PCT = 1.0
BUSY_UTIL_PCT = 99.0
IDLE_POWER_W = 80.0


def load_cdfs(path: Path) -> dict[tuple[str, str], list[tuple[float, float]]]:
    cdfs: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            cdfs[(row["source_file"], row["metric"])].append(
                (float(row["cdf_percent"]), float(row["value"]))
            )
    for points in cdfs.values():
        points.sort()
    return cdfs


def quantile(points: list[tuple[float, float]], pct: float) -> float:
    """Value at percentile `pct`, interpolating the CDF's (percent, value) points."""
    xs = [p for p, _ in points]
    i = bisect.bisect_left(xs, pct)
    if i <= 0:
        return points[0][1]
    if i >= len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (pct - x0) / (x1 - x0)


def share_at_or_below(points: list[tuple[float, float]], threshold: float) -> float:
    """Fraction of samples <= threshold (largest cdf percent whose value is <= it)."""
    return max((p for p, v in points if v <= threshold), default=0.0) / 100


def calibrate(csv_path: Path) -> dict:
    cdfs = load_cdfs(csv_path)
    clusters: dict[str, dict[str, list[float]]] = {}
    shares: dict[str, dict[str, float]] = {}
    for cluster, metrics in SOURCES.items():
        table: dict[str, list[float]] = {}
        for key, source in metrics.items():
            points = cdfs[source]
            if not points:
                raise SystemExit(f"{csv_path}: no rows for {source[0]} / {source[1]}")
            values = [round(quantile(points, p), 4) for p in PERCENTILES]
            if key in CAPS:
                values = [min(v, CAPS[key]) for v in values]
            table[key] = values
        clusters[cluster] = table
        util, power = cdfs[metrics["gpu_util"]], cdfs[metrics["gpu_power_w"]]
        shares[cluster] = {
            "gpu_util_le_1pct": round(share_at_or_below(util, IDLE_UTIL_PCT), 4),
            "gpu_util_ge_99pct": round(1 - share_at_or_below(util, BUSY_UTIL_PCT - 1e-9), 4),
            "gpu_power_le_80w": round(share_at_or_below(power, IDLE_POWER_W), 4),
        }
    for cluster, (donor, keys) in BORROWED.items():
        for key in keys:
            clusters[cluster][key] = clusters[donor][key]
    return {
        "source": (
            "AcmeTrace (InternLM/AcmeTrace @6d6ac9c, CC BY 4.0; Hu et al., NSDI '24), "
            "acmetrace/derived/util_cdf_long.csv; generated by python -m collectors.calibrate"
        ),
        "notes": {
            "borrowed": {c: f"{', '.join(k)} from {d}" for c, (d, k) in BORROWED.items()},
            "caps": CAPS,
            "ib_unit": "unstated in AcmeTrace; max ~23,700 matches HDR 200 Gb/s if MB/s",
            "thresholds": {
                "idle_util_pct": IDLE_UTIL_PCT,
                "busy_util_pct": BUSY_UTIL_PCT,
                "idle_power_w": IDLE_POWER_W,
            },
        },
        "percentiles": PERCENTILES,
        "shares": shares,
        "clusters": clusters,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.calibrate", description=__doc__)
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.csv.exists():
        print(f"calibrate: {args.csv} not found (pass --csv)", file=sys.stderr)
        return 2
    data = calibrate(args.csv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {json.dumps(data['shares'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
