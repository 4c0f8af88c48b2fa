"""carbon.py against the real database: the dated PUE table (overlaps refused, past months use
the PUE valid then), market factors, hourly intensity with its fallbacks, node power profiles,
and `manage.py energy_pue`."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from webapp.energy import carbon
from webapp.energy.carbon_services import market_factor_set, pue_set
from webapp.energy.models import (
    ClusterCarbonSettings,
    IntensityDataset,
    IntensityHour,
    NodePowerProfile,
    PuePeriod,
)
from webapp.fleet.models import Cluster, Node

JAN = datetime(2026, 1, 1, tzinfo=UTC)
FEB = datetime(2026, 2, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
APR = datetime(2026, 4, 1, tzinfo=UTC)


@pytest.fixture
def cluster(db) -> Cluster:
    return Cluster.objects.create(name="seren", grid_zone="CN")


def test_no_pue_given_means_158_assumed(cluster):
    pue = carbon.pue_at(cluster, FEB)
    assert (pue.value, pue.basis) == (1.58, "assumed")
    assert "Uptime" in pue.source


def test_past_months_use_the_pue_valid_then(cluster):
    pue_set(cluster, JAN, 1.35, "measured", "facility meters, monthly")
    done = pue_set(cluster, MAR, 1.25, "measured", "facility meters after the chiller upgrade")
    # The new measurement closed the open-ended January period on 1 March.
    assert done.closed is not None and done.closed.until == MAR
    assert carbon.pue_at(cluster, FEB + timedelta(days=3)).value == 1.35
    assert carbon.pue_at(cluster, MAR).value == 1.25
    assert carbon.pue_at(cluster, datetime(2025, 12, 31, tzinfo=UTC)).value == 1.58

    periods = carbon.pue_periods(cluster, datetime(2025, 12, 15, tzinfo=UTC), APR)
    assert [(p.value, p.since, p.until, p.basis) for p in periods] == [
        (1.58, datetime(2025, 12, 15, tzinfo=UTC), JAN, "assumed"),
        (1.35, JAN, MAR, "measured"),
        (1.25, MAR, APR, "measured"),
    ]


def test_overlapping_pue_periods_are_refused_and_nothing_changes(cluster):
    pue_set(cluster, JAN, 1.35, "measured", "meters", until=MAR)
    with pytest.raises(ValidationError, match="overlaps the existing period"):
        pue_set(cluster, FEB, 1.2, "measured", "meters")
    # An open-ended period before a closed one cannot be superseded into an overlap either.
    with pytest.raises(ValidationError, match="overlaps"):
        pue_set(cluster, datetime(2025, 12, 1, tzinfo=UTC), 1.4, "assumed", "guess", until=FEB)
    assert list(PuePeriod.objects.values_list("value", "since", "until")) == [(1.35, JAN, MAR)]
    with pytest.raises(ValidationError, match="between 1.0 and 3.0"):
        pue_set(cluster, APR, 0.9, "measured", "meters")


def test_energy_pue_command(cluster):
    out = io.StringIO()
    call_command(
        "energy_pue",
        "--cluster",
        "seren",
        "--since",
        "2026-01-01",
        "--value",
        "1.3",
        "--source",
        "measured",
        stdout=out,
    )
    assert "seren: PUE 1.3 (measured) from 2026-01-01, open-ended" in out.getvalue()
    assert carbon.pue_at(cluster, FEB) == carbon.Pue(
        1.3, "measured", "measured (manage.py energy_pue)"
    )
    with pytest.raises(CommandError, match="overlaps"):
        call_command(
            "energy_pue",
            "--cluster",
            "seren",
            "--since",
            "2025-12-01",
            "--until",
            "2026-02-01",
            "--value",
            "1.4",
            "--source",
            "assumed",
        )
    with pytest.raises(CommandError, match="unknown cluster 'kalos'"):
        call_command(
            "energy_pue",
            "--cluster",
            "kalos",
            "--since",
            "2026-01-01",
            "--value",
            "1.3",
            "--source",
            "measured",
        )
    with pytest.raises(CommandError, match="expected a date YYYY-MM-DD"):
        call_command(
            "energy_pue",
            "--cluster",
            "seren",
            "--since",
            "01/02/2026",
            "--value",
            "1.3",
            "--source",
            "measured",
        )
    with pytest.raises(CommandError, match="measured or assumed"):
        call_command(
            "energy_pue",
            "--cluster",
            "seren",
            "--since",
            "2026-05-01",
            "--value",
            "1.3",
            "--source",
            "metered",
        )
    assert PuePeriod.objects.count() == 1


def test_market_factor_none_until_set_then_dated(cluster):
    assert carbon.market_factor(cluster, FEB) is None
    call_command(
        "energy_pue",
        "--cluster",
        "seren",
        "--since",
        "2026-02-01",
        "--market-kg-per-kwh",
        "0",
        "--source",
        "wind PPA, 100% matched",
        stdout=io.StringIO(),
    )
    assert carbon.market_factor(cluster, JAN) is None
    f = carbon.market_factor(cluster, MAR)
    assert (f.kg_per_kwh, f.since, f.until, f.source) == (0.0, FEB, None, "wind PPA, 100% matched")
    with pytest.raises(ValidationError, match="negative"):
        market_factor_set(cluster, APR, -0.1, "typo")


def hours(lo: datetime, n: int) -> list[datetime]:
    return [lo + timedelta(hours=i) for i in range(n)]


def test_intensity_hourly_uses_the_series_then_the_yearly_table_then_the_world(cluster):
    ds = IntensityDataset.objects.create(
        name="CN_2026_hourly.csv",
        zone="CN",
        file_format="electricitymaps",
        basis="lca",
        first_hour=JAN,
        last_hour=JAN + timedelta(hours=1),
        hours=2,
    )
    IntensityHour.objects.bulk_create(
        [
            IntensityHour(dataset=ds, zone="CN", hour=h, g_per_kwh=g)
            for h, g in zip(hours(JAN, 2), (600, 610), strict=True)
        ]
    )
    s = carbon.intensity_hourly(cluster, JAN + timedelta(minutes=30), JAN + timedelta(hours=3))
    assert [h.start for h in s] == hours(JAN, 3)
    assert [h.g_per_kwh for h in s] == [600, 610, pytest.approx(582.317)]
    assert s.sources == ("hourly:CN_2026_hourly.csv", "yearly:OWID/Ember via CodeCarbon 3.3.2 2023")
    assert s.g_per_kwh_at(JAN + timedelta(minutes=90)) == 610
    with pytest.raises(KeyError):
        s.g_per_kwh_at(JAN + timedelta(hours=5))

    # A sub-national zone of the carbon settings wins over the fleet zone; no row for it, so
    # its country's yearly value is used.
    ClusterCarbonSettings.objects.create(cluster=cluster, grid_zone="US-CAL-CISO")
    s = carbon.intensity_hourly(cluster, JAN, JAN + timedelta(hours=2))
    assert s.zone == "US-CAL-CISO" and [h.g_per_kwh for h in s] == [pytest.approx(369.473)] * 2

    nowhere = Cluster.objects.create(name="kalos")
    s = carbon.intensity_hourly(nowhere, JAN, JAN + timedelta(hours=24))
    assert len(s) == 24 and s.sources == ("world:IEA 2019",) and s.mean_g_per_kwh == 475


def test_a_site_override_comes_first(cluster):
    ClusterCarbonSettings.objects.create(
        cluster=cluster,
        intensity_override_g_per_kwh=420.0,
        intensity_override_source="supplier disclosure 2025",
    )
    s = carbon.intensity_hourly(cluster, JAN, JAN + timedelta(hours=2))
    assert [(h.g_per_kwh, h.source) for h in s] == [(420.0, "site:supplier disclosure 2025")] * 2


def test_node_power_estimate_uses_the_longest_matching_profile(cluster):
    node = Node.objects.create(cluster=cluster, hostname="gpu-a-001", token_hash="x")
    assert carbon.node_power_estimate_w(node, 3200, 50) == pytest.approx(4800)
    NodePowerProfile.objects.create(cluster=cluster, name="any", cpu_tdp_w=100)
    NodePowerProfile.objects.create(
        cluster=cluster,
        name="A100 8x",
        hostname_prefix="gpu-a-",
        cpu_tdp_w=270,
        cpu_sockets=2,
        memory_gb=1024,
        other_w=100,
    )
    assert carbon.node_power_estimate_w(node, 480, 0) == pytest.approx(
        (480 + 54 + 384 + 100) / 0.904
    )


def test_the_admin_refuses_an_overlapping_pue_period(cluster, client, django_user_model):
    pue_set(cluster, JAN, 1.35, "measured", "meters", until=MAR)
    url = "/admin/energy/pueperiod/add/"
    assert client.get(url).status_code == 302  # login first
    client.force_login(django_user_model.objects.create_superuser("root"))
    form = {
        "cluster": cluster.pk,
        "since_0": "2026-02-01",
        "since_1": "00:00:00",
        "until_0": "",
        "until_1": "",
        "value": "1.2",
        "basis": "measured",
        "source": "meters",
    }
    page = client.post(url, form)
    assert page.status_code == 200 and "overlaps the existing period" in page.content.decode()
    assert PuePeriod.objects.count() == 1
    form.update(since_0="2026-03-01")
    assert client.post(url, form).status_code == 302
    assert carbon.pue_at(cluster, APR).value == 1.2
