"""Which retention tier holds a span of GPU telemetry (README "Storage and retention").

Samples (raw, or compacted past VIGIL_COMPACT_AFTER_HOURS, both read through `samples.py`) are
kept VIGIL_RETENTION_DAYS, the 1-minute rollup VIGIL_ROLLUP_RETENTION_DAYS and the hourly
rollup VIGIL_HOURLY_ROLLUP_RETENTION_DAYS. A reader names the finest tier it would like for a
span (raw samples for a short job, the 1-minute rollup for a long one); `tiers_for` answers
with that tier if it still holds the span's start, else the next coarser one that does, and
then the coarser ones after it, so a reader that finds no rows in one tier (a partition
dropped early, a retention shortened) tries the next instead of drawing an empty plot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from webapp.telemetry.partitions import oldest_kept


@dataclass(frozen=True)
class Tier:
    key: str  # "samples", "1m" or "1h"
    label: str  # how a page names the resolution it shows
    table: str  # the partitioned table whose retention bounds the tier
    step_s: int | None  # the tier's cell width; None: samples as they came

    def kept_since(self, now: datetime | None = None) -> datetime:
        """The oldest time the tier still holds (midnight UTC of its first kept day)."""
        day = oldest_kept(self.table, today=(now or datetime.now(UTC)).date())
        return datetime(day.year, day.month, day.day, tzinfo=UTC)


SAMPLES = Tier("samples", "raw samples", "telemetry_gpusample", None)
MINUTE = Tier("1m", "1-minute rollup", "telemetry_gpurollup1m", 60)
HOURLY = Tier("1h", "hourly rollup", "telemetry_gpurollup1h", 3600)
TIERS: tuple[Tier, ...] = (SAMPLES, MINUTE, HOURLY)  # finest first


def tiers_for(lo: datetime, finest: Tier = SAMPLES, now: datetime | None = None) -> list[Tier]:
    """The tiers to read a span starting at `lo` from, best first: `finest` if it still holds
    `lo`, else the first coarser one that does; then every coarser one, as fallbacks. The
    hourly rollup is always last (it is the longest kept)."""
    order = list(TIERS[TIERS.index(finest) :])
    for i, tier in enumerate(order):
        if tier is HOURLY or lo >= tier.kept_since(now):
            return order[i:]
    return [HOURLY]


def tier_for(lo: datetime, finest: Tier = SAMPLES, now: datetime | None = None) -> Tier:
    """The best tier for a span starting at `lo` (the first of `tiers_for`)."""
    return tiers_for(lo, finest, now)[0]
