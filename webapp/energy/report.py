"""The managers' monthly energy report (reference §8): its context, shared by the printable
page, the PDF, the email and `manage.py energy_report`; the PDF; the CSV and JSON forms.

The PDF is the printable page printed by headless Chromium (`--print-to-pdf`): Chromium is
already a dependency of the browser tests and of Plotly's figures, it prints exactly what the
page shows (figures included, drawn by the same vendored plotly.js), and WeasyPrint, the usual
HTML-to-PDF library, is not on the local package index (and draws no JavaScript figures).
The page is written to a temporary folder and printed from a file:// URL with file:// links to
the static files, so printing needs no web server, no login and no network.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.template.loader import render_to_string
from django.templatetags.static import static

from webapp.core.units import ENERGY_UNITS, MASS_UNITS, unit_for
from webapp.energy import figures
from webapp.energy.selectors import EnergyReport, month_report_cached, months_ending
from webapp.energy.trends import IDLE_KEY, Trends, energy_trends_cached
from webapp.fleet.models import Cluster

# Seconds Chromium may take to print (start, lay out, draw six figures), with a wide margin.
PDF_TIMEOUT_S = 60
# Virtual time Chromium gives the page's scripts before it prints (ms): figures.js draws on
# load, well within it.
PDF_SCRIPT_BUDGET_MS = 5000
_ASSETS = {
    "base_css": "base.css",
    "css": "energy/report.css",
    "plotly": "vendor/plotly-4.1.1.min.js",
    "figures_js": "figures.js",
}


class ReportError(RuntimeError):
    """The PDF could not be made (no Chromium, or it failed), with the reason."""


def _change(now: float | None, before: float | None) -> float | None:
    if now is None or not before:
        return None
    return (now - before) / before


def kpis(r: EnergyReport, p: EnergyReport | None) -> list[dict]:
    """The headline figures beside last month's, with the change."""

    def row(label: str, attr: str, unit: str, scale: float = 1.0, digits: int = 1):
        value = getattr(r, attr)
        before = getattr(p, attr) if p else None
        return {
            "label": label,
            "key": attr,
            "unit": unit,
            "digits": digits,
            "value": None if value is None else value * scale,
            "previous": None if before is None else before * scale,
            "change": _change(value, before),
        }

    # One energy unit and one mass unit for the whole table (its largest value decides).
    energy_attrs = ("gpu_kwh", "it_kwh", "facility_kwh", "idle_kwh", "wasted_kwh", "lost_kwh")
    mass_attrs = ("co2e_location_kg", "co2e_market_kg", "embodied_kg")
    months = [x for x in (r, p) if x is not None]
    e_unit, e_scale, e_digits = unit_for(
        [getattr(x, a) for x in months for a in energy_attrs], ENERGY_UNITS
    )
    m_unit, m_scale, m_digits = unit_for(
        [getattr(x, a) for x in months for a in mass_attrs], MASS_UNITS
    )
    rows = [
        row("GPU energy", "gpu_kwh", e_unit, e_scale, e_digits),
        row("IT energy", "it_kwh", e_unit, e_scale, e_digits),
        row("Facility energy", "facility_kwh", e_unit, e_scale, e_digits),
        row("PUE", "pue", "", 1, 2),
        row("CO2e, location-based", "co2e_location_kg", m_unit, m_scale, m_digits),
        row("CO2e, market-based", "co2e_market_kg", m_unit, m_scale, m_digits),
        row("Embodied CO2e (separate)", "embodied_kg", m_unit, m_scale, m_digits),
        row("GPU-hours with samples", "gpu_hours", "GPU-h", 1, 0),
        row("kWh per GPU-hour", "kwh_per_gpu_hour", "kWh/GPU-h", 1, 3),
        row("Mean GPU power", "mean_gpu_power_w", "W", 1, 0),
        row("Idle GPU energy (no job)", "idle_kwh", e_unit, e_scale, e_digits),
        row("Allocated but idle", "wasted_kwh", e_unit, e_scale, e_digits),
        row("Lost to failures", "lost_kwh", e_unit, e_scale, e_digits),
    ]
    if r.cost is not None:
        rows.insert(6, row(f"Cost ({settings.VIGIL_ENERGY_CURRENCY})", "cost", "", 1, 0))
    return rows


def method_footnote(r: EnergyReport) -> dict:
    """Reference §8's method footnote: energy by method, PUE source, intensity, gaps."""
    by = r.gpu_kwh_by_method
    total = r.gpu_kwh or 1.0
    return {
        "shares": [(name, by[name] / total) for name in ("counter", "integrated", "model")],
        "it_measured_share": r.it_measured_share,
        "pue": [
            {
                "value": p.value,
                "basis": p.basis,
                "source": p.source,
                "since": p.since,
                "until": p.until,
            }
            for p in r.pue_periods
        ],
        "intensity": r.intensity_g_per_kwh,
        "intensity_sources": r.intensity_sources,
        "market_source": r.market_source,
        "method_version": r.method_version,
        "gaps": [
            "MIG partitions are accounted as their whole GPU",
            "CPU-only nodes (no GPU samples) are not in IT energy",
            "nodes without IPMI power are modelled from their GPUs' energy (node power model)",
        ],
    }


def _height(figure: dict, px: int) -> dict:
    figure["layout"]["height"] = px
    return figure


# Teams the team × month tables (the page's and the printed report's) list one by one, largest
# first; the rest are one row, each of them in the trends CSV.
TREND_TABLE_TEAMS = 20


def trend_team_table(t: Trends) -> dict:
    """The team × month table of the page and the report: the TREND_TABLE_TEAMS largest teams
    (t.teams' order), the rest as one row and the idle GPUs last, each with its facility kWh in
    every month that has data (None: none then) and its total over them when there are several;
    how many teams the trend figures stack apart, and how many they fold."""
    months = [m for m in t.months if m.has_data]

    def row(label: str, teams: list[str]) -> tuple[str, list[float | None], float]:
        cells = [m.team_kwh.get(teams[0]) for m in months]
        if len(teams) > 1:
            cells = [sum(m.team_kwh.get(x) or 0.0 for x in teams) or None for m in months]
        return label, cells, sum(v for v in cells if v is not None)

    teams = [team for team in t.teams if team != IDLE_KEY]
    head, rest = teams[:TREND_TABLE_TEAMS], teams[TREND_TABLE_TEAMS:]
    if len(rest) == 1:
        head, rest = teams, []
    rows = [row(team, [team]) for team in head]
    if rest:
        rows.append(row(f"({len(rest)} other teams)", rest))
    if IDLE_KEY in t.teams:
        rows.append(row(IDLE_KEY, [IDLE_KEY]))
    named = len(teams)
    folded = named - figures.TREND_TEAMS if named > figures.TREND_TEAMS + 1 else 0
    return {
        "months": months,
        "rows": rows,
        "total": len(months) > 1,
        "shown": figures.TREND_TEAMS,
        "listed": len(head),
        "others": len(rest),  # teams in the one row of the others
        "folded": folded,
    }


def report_team_months(t: Trends, month: str) -> dict:
    """The printed report's teams: per row of the team × month table (trend_team_table), its
    facility kWh in `month` and the month before (None: no data then), the change between them
    (None without both), and its kWh and share over the twelve months. An A4 sheet holds these
    six columns at any number of teams and any size of site; twelve month columns it did not."""
    table = trend_team_table(t)
    names = [m.month for m in table["months"]]
    i = names.index(month) if month in names else None
    before = months_ending(month, 2)[0]
    j = names.index(before) if before in names else None
    grand = sum(total for _, _, total in table["rows"])
    rows = []
    for team, cells, total in table["rows"]:
        now = cells[i] if i is not None else None
        prev = cells[j] if j is not None else None
        change = (now - prev) / prev if now is not None and prev else None
        rows.append((team, now, prev, change, total, total / grand if grand else None))
    return {"month": month, "previous": before, "rows": rows, "listed": table["listed"],
            "others": table["others"], "span": len(t.months), "with_data": len(names)}  # fmt: skip


def report_context(cluster: Cluster, month: str) -> dict:
    """Everything the printable report shows; NoEnergyData / ValueError on a bad month."""
    r, p = month_report_cached(cluster, month)
    trends = energy_trends_cached(cluster, month)
    return {
        "cluster": cluster,
        "month": month,
        "r": r,
        "p": p,
        "trends": trends,
        # Teams are rows: a column per team was wider than the sheet at a site's tens of teams.
        "team_months": report_team_months(trends, month),
        "kpis": kpis(r, p),
        "footnote": method_footnote(r),
        "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
        "figures": {
            # 270 px, not the page's 300: the summary sheet (header, KPIs, two figures) then
            # fits A4 with room to spare (at 300 it was 274 mm of the 273 mm printable).
            "daily-energy": _height(figures.daily_energy_figure(r.days), 270),
            "daily-co2": _height(figures.daily_co2_pue_figure(r.days), 270),
            "by-team": figures.breakdown_figure(r.by_team, r.idle_line, "by team"),
            **figures.trend_figures(trends, compact=True),
        },
    }


def web_assets() -> dict:
    return {k: static(v) for k, v in _ASSETS.items()}


def file_assets() -> dict:
    out = {}
    for k, v in _ASSETS.items():
        found = finders.find(v)
        if not found:
            raise ReportError(f"static file {v} not found")
        out[k] = Path(found).resolve().as_uri()
    return out


def report_html(context: dict, *, for_pdf: bool) -> str:
    assets = file_assets() if for_pdf else web_assets()
    return render_to_string("energy/report.html", {**context, "assets": assets, "for_pdf": for_pdf})


def html_to_pdf(html: str) -> bytes:
    """Print a self-contained page with headless Chromium; ReportError on failure."""
    chromium = settings.VIGIL_CHROMIUM
    if not chromium or not Path(chromium).exists():
        raise ReportError(
            f"Chromium not found at {chromium!r}: install it (apt chromium) or set VIGIL_CHROMIUM"
        )
    with tempfile.TemporaryDirectory(prefix="vigil-report-") as tmp:
        page, out = Path(tmp) / "report.html", Path(tmp) / "report.pdf"
        page.write_text(html, encoding="utf-8")
        cmd = [
            chromium,
            "--headless",
            # Chromium cannot sandbox a root process (it refuses to start): only then without.
            *(["--no-sandbox"] if os.geteuid() == 0 else []),
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-pdf-header-footer",
            "--run-all-compositor-stages-before-draw",
            f"--virtual-time-budget={PDF_SCRIPT_BUDGET_MS}",
            f"--user-data-dir={tmp}/profile",
            f"--print-to-pdf={out}",
            page.as_uri(),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=PDF_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ReportError(f"Chromium did not print within {PDF_TIMEOUT_S} s") from None
        if not out.exists() or out.stat().st_size == 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise ReportError(
                f"Chromium printed nothing (exit {done.returncode}): {' '.join(tail)}"
            )
        return out.read_bytes()


def report_pdf_from(context: dict) -> bytes:
    return html_to_pdf(report_html(context, for_pdf=True))


def report_pdf(cluster: Cluster, month: str) -> bytes:
    return report_pdf_from(report_context(cluster, month))


CSV_HEADER = (
    "month",
    "cluster",
    "section",
    "key",
    "gpu_hours",
    "gpu_kwh",
    "facility_kwh",
    "co2e_location_kg",
    "co2e_market_kg",
    "share_of_facility",
    "method_version",
)


def report_rows(r: EnergyReport, month: str) -> list[tuple]:
    """The report as CSV rows: totals, then each breakdown (team, account, project, type,
    outcome, user, jobs) and the idle GPUs; facility shares add up to 1 with the unattributed
    line."""
    name = r.cluster.name
    v = r.method_version
    rows = [
        (month, name, "total", "all", r.gpu_hours, r.gpu_kwh, r.facility_kwh, r.co2e_location_kg,
         r.co2e_market_kg, 1.0, v),
    ]  # fmt: skip
    for section, lines in (
        ("team", r.by_team),
        ("account", r.by_account),
        ("project", r.by_project),
        ("job_type", r.by_type),
        ("outcome", r.by_outcome),
        ("user", r.by_user),
        ("top_job", r.top_jobs),
    ):
        for x in lines:
            rows.append((month, name, section, x.key, x.gpu_hours, x.gpu_kwh, x.facility_kwh,
                         x.co2e_location_kg, x.co2e_market_kg, x.share, v))  # fmt: skip
    if r.idle_line:
        x = r.idle_line
        rows.append((month, name, "idle", "no job", x.gpu_hours, x.gpu_kwh, x.facility_kwh,
                     x.co2e_location_kg, x.co2e_market_kg, x.share, v))  # fmt: skip
    for key, kwh, hours in (
        ("allocated but idle", r.wasted_kwh, r.wasted_gpu_hours),
        ("lost to failures", r.lost_kwh, r.lost_gpu_hours),
    ):
        rows.append((month, name, "waste", key, hours, kwh, None, None, None, None, v))
    return rows


TRENDS_CSV_HEADER = (
    "cluster",
    "month",
    "team",
    "facility_kwh",
    "co2e_location_kg",
    "co2e_market_kg",
    "it_kwh",
    "pue",
    "intensity_g_per_kwh",
    "intensity_sources",
    "method_version",
)


def trend_rows(cluster: Cluster, t: Trends) -> list[tuple]:
    """The trends as CSV rows: per month, its totals (team "(all)", with PUE and intensity)
    and one row per team; the team rows and the month's unattributed node energy add up to
    the month's facility kWh."""
    rows = []
    v = t.method_version
    for m in t.months:
        rows.append((cluster.name, m.month, "(all)", m.facility_kwh, m.co2e_location_kg,
                     m.co2e_market_kg, m.it_kwh, m.pue, m.intensity_g_per_kwh,
                     "; ".join(m.intensity_sources), v))  # fmt: skip
        for team in t.teams:
            if team in m.team_kwh:
                rows.append((cluster.name, m.month, team, m.team_kwh[team],
                             m.team_co2e_kg[team], None, None, None, None, None, v))  # fmt: skip
    return rows


def trends_json(t: Trends) -> list[dict]:
    return [
        {
            "month": m.month,
            "it_kwh": m.it_kwh,
            "facility_kwh": m.facility_kwh,
            "co2e_location_kg": m.co2e_location_kg,
            "co2e_market_kg": m.co2e_market_kg,
            "pue": m.pue,
            "intensity_g_per_kwh": m.intensity_g_per_kwh,
            "intensity_sources": list(m.intensity_sources),
            "facility_kwh_by_team": m.team_kwh,
            "co2e_location_kg_by_team": m.team_co2e_kg,
        }
        for m in t.months
    ]


def report_json(
    r: EnergyReport, p: EnergyReport | None, month: str, trends: Trends | None = None
) -> dict:
    def lines(xs):
        return [
            {"key": x.key, "gpu_hours": x.gpu_hours, "gpu_kwh": x.gpu_kwh,
             "facility_kwh": x.facility_kwh, "co2e_location_kg": x.co2e_location_kg,
             "co2e_market_kg": x.co2e_market_kg, "share": x.share, **x.detail}
            for x in xs
        ]  # fmt: skip

    def totals(x: EnergyReport | None):
        if x is None:
            return None
        return {
            "gpu_kwh": x.gpu_kwh,
            "gpu_kwh_by_method": x.gpu_kwh_by_method,
            "it_kwh": x.it_kwh,
            "it_kwh_measured": x.it_kwh_measured,
            "facility_kwh": x.facility_kwh,
            "pue": x.pue,
            "co2e_location_kg": x.co2e_location_kg,
            "co2e_market_kg": x.co2e_market_kg,
            "embodied_kg": x.embodied_kg,
            "gpu_hours": x.gpu_hours,
            "completeness": x.completeness,
            "measured_share": x.measured_share,
            "idle_kwh": x.idle_kwh,
            "wasted_kwh": x.wasted_kwh,
            "lost_kwh": x.lost_kwh,
            "kwh_per_gpu_hour": x.kwh_per_gpu_hour,
            "mean_gpu_power_w": x.mean_gpu_power_w,
            "cost": x.cost,
        }

    return {
        "cluster": r.cluster.name,
        "month": month,
        "method_version": r.method_version,
        "totals": totals(r),
        "previous_month": totals(p),
        "by_team": lines(r.by_team),
        "by_account": lines(r.by_account),
        "by_project": lines(r.by_project),
        "by_job_type": lines(r.by_type),
        "by_outcome": lines(r.by_outcome),
        "top_jobs": lines(r.top_jobs),
        "idle": lines([r.idle_line] if r.idle_line else []),
        "trends": trends_json(trends) if trends else None,
        "footnote": {k: v for k, v in method_footnote(r).items() if k not in ("pue",)}
        | {
            "pue": [{"value": q.value, "basis": q.basis, "source": q.source} for q in r.pue_periods]
        },
    }
