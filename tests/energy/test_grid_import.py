"""`manage.py grid_import`: Electricity Maps exports (both header generations) and the plain
format; any bad line refuses the whole file with one error line and a non-zero exit."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, ManagementUtility, call_command

from webapp.energy import carbon
from webapp.energy.intensity_csv import IntensityCsvError, parse_intensity_csv
from webapp.energy.models import IntensityDataset, IntensityHour
from webapp.fleet.models import Cluster

# Headers as Electricity Maps' data portal lists its CSV fields; the 2021-2023 files say
# "Zone Id" and "(LCA)", newer ones "Zone id" and "(Life cycle)". The SE rows are from a
# published 2021 SE export (values as recorded there).
EM_OLD = (
    "Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),"
    "Carbon Intensity gCO₂eq/kWh (LCA),Low Carbon Percentage,Renewable Percentage,"
    "Data Source,Data Estimated,Data Estimation Method\n"
)
EM_NEW = (
    "Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),"
    "Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%),"
    "Renewable energy percentage (RE%),Data source,Data estimated,Data estimation method\n"
)
SE_ROWS = (
    "2021-01-01 00:00:00,Sweden,Sweden,SE,2.54,30.02,99.42,60.13,svk.se,true,"
    "ESTIMATED_FORECASTS_HIERARCHY\n"
    "2021-01-01 01:00:00,Sweden,Sweden,SE,2.6,30.32,99.4,59.52,svk.se,true,"
    "ESTIMATED_FORECASTS_HIERARCHY\n"
)
H0 = datetime(2021, 1, 1, tzinfo=UTC)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def grid_import(*args: str) -> str:
    out = io.StringIO()
    call_command("grid_import", *map(str, args), stdout=out)
    return out.getvalue()


def test_both_electricity_maps_generations_parse():
    new = parse_intensity_csv(io.StringIO(EM_NEW + SE_ROWS))
    old = parse_intensity_csv(io.StringIO(EM_OLD + SE_ROWS), basis="direct")
    assert (new.zone, new.file_format, new.basis) == ("SE", "electricitymaps", "lca")
    assert new.rows == ((H0, 30.02), (H0.replace(hour=1), 30.32))
    assert [v for _, v in old.rows] == [2.54, 2.6]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,co2\n2021-01-01 00:00,30\n", "header not recognised"),
        (
            EM_NEW + SE_ROWS + "2021-01-01 02:00:00,Sweden,Sweden,SE,2.6,n/a,,,,,\n",
            "line 4: bad intensity 'n/a'",
        ),
        (EM_NEW + "2021-01-01 00:30:00,Sweden,Sweden,SE,2.5,30,,,,,\n", "not on the hour"),
        (EM_NEW + SE_ROWS + SE_ROWS, "line 4: hour 2021-01-01 00:00 appears twice"),
        (
            EM_NEW
            + "2021-01-01 00:00:00,Sweden,Sweden,SE,2.5,30\n"
            + "2021-13-01 00:00:00,Sweden,Sweden,SE,2.5,30\n",
            "line 3: bad datetime",
        ),
        (EM_NEW + "2021-01-01 00:00:00,Sweden,Sweden,SE,2.5,1200000\n", "wrong unit"),
        (EM_NEW + SE_ROWS + "2021-01-01 00:00:00,Norway,NO1,NO-NO1,2.5,30\n", "several zones"),
    ],
)
def test_bad_files_are_refused_naming_the_problem(text, message):
    with pytest.raises(IntensityCsvError, match=message):
        parse_intensity_csv(io.StringIO(text))


def test_import_stores_the_series_and_carbon_reads_it(db, tmp_path):
    cluster = Cluster.objects.create(name="seren", grid_zone="SE")
    out = grid_import(write(tmp_path, "SE_2021_hourly.csv", EM_NEW + SE_ROWS))
    assert (
        "SE_2021_hourly.csv: 2 hours of zone SE (lca), 2021-01-01 00:00 to 2021-01-01 01:00" in out
    )
    s = carbon.intensity_hourly(cluster, H0, H0.replace(hour=3))
    assert [h.g_per_kwh for h in s] == [30.02, 30.32, pytest.approx(40.695)]
    assert s.sources[0] == "hourly:SE_2021_hourly.csv"

    # A corrected export of the same name replaces the series.
    grid_import(write(tmp_path, "SE_2021_hourly.csv", EM_NEW + SE_ROWS.replace("30.02", "31.5")))
    assert list(IntensityHour.objects.values_list("g_per_kwh", flat=True)) == [31.5, 30.32]
    # Another file with the same hours is refused: each hour has one named source.
    with pytest.raises(
        CommandError, match="already has hours .* from dataset 'SE_2021_hourly.csv'"
    ):
        grid_import(write(tmp_path, "other.csv", EM_OLD + SE_ROWS))


def test_a_bad_line_imports_nothing(db, tmp_path):
    rows = "".join(f"2021-01-01 {h:02d}:00:00,Sweden,Sweden,SE,2.5,30\n" for h in range(20))
    bad = write(tmp_path, "SE.csv", EM_NEW + rows + "2021-01-01 20:00:00,Sweden,Sweden,SE,2.5,\n")
    with pytest.raises(CommandError, match="SE.csv: line 22: bad intensity ''"):
        grid_import(bad)
    assert not IntensityDataset.objects.exists() and not IntensityHour.objects.exists()


def test_unknown_zone_and_zone_option(db, tmp_path):
    with pytest.raises(CommandError, match="unknown zone 'ZZ-MARS'"):
        grid_import(
            write(tmp_path, "mars.csv", "hour_utc,zone,g_per_kwh\n2021-01-01T00:00Z,ZZ-MARS,5\n")
        )
    # A sub-national Electricity Maps zone is known through its country.
    text = "hour_utc,zone,g_per_kwh\n2021-01-01T00:00Z,US-CAL-CISO,210\n2021-01-01T00:00Z,US-NY-NYIS,250\n"
    path = write(tmp_path, "us.csv", text)
    with pytest.raises(CommandError, match="several zones"):
        grid_import(path)
    assert "1 hours of zone US-NY-NYIS" in grid_import(path, "--zone", "us-ny-nyis", "--name", "ny")
    assert not IntensityHour.objects.filter(zone="US-CAL-CISO").exists()


def test_the_cli_says_one_line_and_exits_non_zero(db, tmp_path, capsys):
    path = write(tmp_path, "broken.csv", "time,co2\n2021-01-01 00:00,30\n")
    with pytest.raises(SystemExit) as exit_:
        ManagementUtility(["manage.py", "grid_import", str(path)]).execute()
    assert exit_.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("CommandError: broken.csv: header not recognised")
    missing = tmp_path / "missing.csv"
    with pytest.raises(CommandError, match="missing.csv: No such file"):
        grid_import(missing)
