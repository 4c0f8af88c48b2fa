"""Writes for carbon accounting: dated PUE and market-factor periods, hourly intensity series.

Periods of one cluster never overlap, so "the PUE valid then" has one answer: a new period that
would overlap is refused with the clashing one named. The one convenience: a new period that
starts inside the cluster's open-ended latest period closes that period at its start (a new
measurement supersedes the last one). Every write is one transaction under a lock on the
cluster row, so two concurrent writers cannot both pass the overlap check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from webapp.energy import models as m
from webapp.energy.intensity_csv import ParsedSeries
from webapp.fleet.models import Cluster

Period = m.PuePeriod | m.MarketFactorPeriod


@dataclass(frozen=True)
class PeriodWrite:
    period: Period
    closed: Period | None  # the open-ended period this one superseded, if any


def _span(since: datetime, until: datetime | None) -> str:
    return f"[{since:%Y-%m-%d %H:%M}, {'open' if until is None else f'{until:%Y-%m-%d %H:%M}'})"


def _overlapping(obj: Period) -> list[Period]:
    qs = type(obj).objects.filter(cluster_id=obj.cluster_id).exclude(pk=obj.pk)
    qs = qs.filter(Q(until__isnull=True) | Q(until__gt=obj.since))
    if obj.until is not None:
        qs = qs.filter(since__lt=obj.until)
    return list(qs.order_by("since"))


def _check_fields(obj: Period) -> None:
    if obj.until is not None and obj.until <= obj.since:
        raise ValidationError(
            f"until {obj.until:%Y-%m-%d} must be after since {obj.since:%Y-%m-%d}"
        )
    if isinstance(obj, m.PuePeriod):
        # PUE >= 1 by definition (ISO/IEC 30134-2); 3 is far above any surveyed site.
        if not 1.0 <= obj.value <= 3.0:
            raise ValidationError(f"PUE must be between 1.0 and 3.0, got {obj.value}")
        if obj.basis not in m.PueBasis.values:
            raise ValidationError(f"basis must be measured or assumed, got {obj.basis!r}")
    elif obj.kg_per_kwh < 0:
        raise ValidationError(f"kg_per_kwh must not be negative, got {obj.kg_per_kwh}")
    if not obj.source.strip():
        raise ValidationError("source is required: who measured or stated the value, and how")


def period_check(obj: Period) -> None:
    """Raise ValidationError naming the problem if `obj` is invalid or overlaps a period."""
    _check_fields(obj)
    clash = _overlapping(obj)
    if clash:
        c = clash[0]
        raise ValidationError(
            f"{_span(obj.since, obj.until)} overlaps the existing period "
            f"{_span(c.since, c.until)} of cluster {obj.cluster.name}"
        )


def _period_save(obj: Period, supersede_open: bool) -> PeriodWrite:
    with transaction.atomic():
        Cluster.objects.select_for_update().get(pk=obj.cluster_id)
        _check_fields(obj)
        closed = None
        clash = _overlapping(obj)
        if (
            supersede_open
            and len(clash) == 1
            and clash[0].until is None
            and clash[0].since < obj.since
        ):
            closed = clash[0]
            closed.until = obj.since
            closed.save(update_fields=["until"])
        period_check(obj)
        obj.save()
    return PeriodWrite(obj, closed)


def pue_set(
    cluster: Cluster,
    since: datetime,
    value: float,
    basis: str,
    source: str,
    until: datetime | None = None,
    *,
    supersede_open: bool = True,
) -> PeriodWrite:
    """Record the cluster's PUE over [since, until); refuses overlaps (ValidationError)."""
    obj = m.PuePeriod(
        cluster=cluster, since=since, until=until, value=value, basis=basis, source=source
    )
    return _period_save(obj, supersede_open)


def market_factor_set(
    cluster: Cluster,
    since: datetime,
    kg_per_kwh: float,
    source: str,
    until: datetime | None = None,
    *,
    supersede_open: bool = True,
) -> PeriodWrite:
    """Record a contractual emission factor over [since, until); refuses overlaps."""
    obj = m.MarketFactorPeriod(
        cluster=cluster, since=since, until=until, kg_per_kwh=kg_per_kwh, source=source
    )
    return _period_save(obj, supersede_open)


def intensity_series_store(
    series: ParsedSeries, dataset_name: str, known_zones: Sequence[str] | None = None
) -> m.IntensityDataset:
    """Store one parsed file as a dataset, in one transaction.

    A re-import of the same dataset name replaces it; hours that another dataset already holds
    for the zone are refused (so each hour has one, named, source).
    """
    if known_zones is not None:
        known = {z.upper() for z in known_zones}
        zone = series.zone.upper()
        # A sub-national zone ("US-CAL-CISO") is known when its country is.
        if zone not in known and zone.split("-", 1)[0] not in known:
            raise ValidationError(
                f"unknown zone {series.zone!r}: neither it nor its country is in the grid "
                "table, and no cluster uses it"
            )
    with transaction.atomic():
        m.IntensityDataset.objects.filter(name=dataset_name).delete()
        hours = [h for h, _ in series.rows]
        taken = (
            m.IntensityHour.objects.filter(zone=series.zone, hour__in=hours)
            .values_list("dataset__name", flat=True)
            .first()
        )
        if taken is not None:
            raise ValidationError(
                f"zone {series.zone} already has hours of these dates from dataset {taken!r}; "
                "re-import under that name to replace it"
            )
        ds = m.IntensityDataset.objects.create(
            name=dataset_name,
            zone=series.zone,
            file_format=series.file_format,
            basis=series.basis,
            first_hour=hours[0],
            last_hour=hours[-1],
            hours=len(hours),
        )
        m.IntensityHour.objects.bulk_create(
            [
                m.IntensityHour(dataset=ds, zone=series.zone, hour=h, g_per_kwh=g)
                for h, g in series.rows
            ],
            batch_size=5000,
        )
    return ds
