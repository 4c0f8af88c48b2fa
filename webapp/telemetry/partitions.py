"""Partitions of the sample and rollup tables: made ahead of time, dropped whole after their
tier's retention. Daily, except the hourly rollup's (kept for years: monthly, so a three-year
table has 37 partitions, not 1,100)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction


@dataclass(frozen=True)
class PartitionedTable:
    name: str
    retention_setting: str
    monthly: bool = False

    def retention_days(self) -> int:
        return int(getattr(settings, self.retention_setting))


# The retention tiers (README "Storage and retention"): samples, raw or compacted, for
# VIGIL_RETENTION_DAYS; the 1-minute rollup for VIGIL_ROLLUP_RETENTION_DAYS; the hourly
# rollup for VIGIL_HOURLY_ROLLUP_RETENTION_DAYS.
TABLES: tuple[PartitionedTable, ...] = (
    PartitionedTable("telemetry_gpusample", "VIGIL_RETENTION_DAYS"),
    PartitionedTable("telemetry_gpusamplepacked", "VIGIL_RETENTION_DAYS"),
    PartitionedTable("telemetry_nodesample", "VIGIL_RETENTION_DAYS"),
    PartitionedTable("telemetry_gpurollup1m", "VIGIL_ROLLUP_RETENTION_DAYS"),
    PartitionedTable("telemetry_gpurollup1h", "VIGIL_HOURLY_ROLLUP_RETENTION_DAYS", monthly=True),
)
_MONTHLY = {t.name for t in TABLES if t.monthly}

# Days whose partitions this process knows exist, so ingest asks the catalogue once per day.
_known: set[tuple[str, date]] = set()


def partition_name(table: str, day: date) -> str:
    """The partition of `table` that holds `day`."""
    if table in _MONTHLY:
        return f"{table}_p{day:%Y%m}"
    return f"{table}_p{day:%Y%m%d}"


def _span(table: str, day: date) -> tuple[date, date]:
    """First day of the partition of `table` holding `day`, and the day after its last."""
    if table in _MONTHLY:
        first = day.replace(day=1)
        return first, (first + timedelta(days=32)).replace(day=1)
    return day, day + timedelta(days=1)


def partition_days(table: str) -> dict[str, date]:
    """The partitions of `table` that exist, by name, with the first day each holds."""
    return _existing(table)


def _existing(table: str) -> dict[str, date]:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT c.relname FROM pg_inherits i
            JOIN pg_class c ON c.oid = i.inhrelid
            JOIN pg_class p ON p.oid = i.inhparent
            WHERE p.relname = %s
            """,
            [table],
        )
        names = [r[0] for r in cur.fetchall()]
    out = {}
    for name in names:
        suffix = name.rsplit("_p", 1)[-1]
        try:
            out[name] = datetime.strptime(suffix, "%Y%m" if table in _MONTHLY else "%Y%m%d").date()
        except ValueError:
            continue
    return out


def partition_ensure(table: str, day: date) -> bool:
    """Create the partition of `table` for `day` if missing; True if it was created."""
    day = _span(table, day)[0]
    if (table, day) in _known:
        return False
    name = partition_name(table, day)
    start, end = (_midnight(d) for d in _span(table, day))
    with transaction.atomic(), connection.cursor() as cur:
        # Two workers may meet a new day at once; the lock makes the check-and-create atomic.
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        exists = cur.fetchone()[0]
        if not exists:
            cur.execute(
                f'CREATE TABLE "{name}" PARTITION OF "{table}" FOR VALUES FROM (%s) TO (%s)',
                [start, end],
            )
    _known.add((table, day))
    return not exists


# Retention is bounded per run: the hourly beat task drops at most this many
# partitions per table, oldest first, so a backlog (retention shortened, beat down for weeks)
# is worked off over a few runs instead of one long run. 24 runs a day x 4 is far more than
# the one partition per table that falls out of retention each day.
PARTITION_DROPS_PER_RUN = 4
# DROP of a partition takes an ACCESS EXCLUSIVE lock on its parent, and waiting for it would
# queue every ingest transaction behind the drop; past this wait the drop is left for the next
# run (PostgreSQL docs, "lock_timeout").
PARTITION_DROP_LOCK_TIMEOUT = "2s"


def partitions_maintain(today: date | None = None) -> dict[str, dict[str, list[str]]]:
    """Create partitions for the retention window and the days ahead; drop older ones, at
    most PARTITION_DROPS_PER_RUN per table (what is left, under "left", goes next run)."""
    today = today or datetime.now(UTC).date()
    ahead = settings.VIGIL_PARTITIONS_AHEAD_DAYS
    report: dict[str, dict[str, list[str]]] = {}
    for table in TABLES:
        created, dropped = [], []
        oldest = today - timedelta(days=table.retention_days())
        for offset in range(-1, ahead + 1):
            day = today + timedelta(days=offset)
            if partition_ensure(table.name, day):
                created.append(partition_name(table.name, day))
        # A partition goes once all of it is older than the oldest day kept.
        due = [
            (n, d)
            for n, d in sorted(_existing(table.name).items(), key=_by_day)
            if _span(table.name, d)[1] <= oldest
        ]
        for name, day in due[:PARTITION_DROPS_PER_RUN]:
            if _drop(name):
                _known.discard((table.name, day))
                dropped.append(name)
        left = [name for name, _ in due if name not in dropped]
        report[table.name] = {"created": created, "dropped": dropped, "left": left}
    # The latest-values table keeps a row per GPU however old; one that fell out of raw
    # retention goes with it (a GPU that reports again gets a new row).
    with connection.cursor() as cur:
        cur.execute(
            "DELETE FROM telemetry_gpulatest WHERE ts < %s",
            [_midnight(oldest_kept(today=today))],
        )
    return report


def _by_day(item: tuple[str, date]) -> date:
    return item[1]


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _drop(name: str) -> bool:
    """Drop one partition in its own short transaction; False if its lock was not had in
    PARTITION_DROP_LOCK_TIMEOUT (readers or writers of the table held it)."""
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                "SELECT set_config('lock_timeout', %s, true)", [PARTITION_DROP_LOCK_TIMEOUT]
            )
            cur.execute(f'DROP TABLE IF EXISTS "{name}"')
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        return False
    return True


def oldest_kept(table: str = "telemetry_gpusample", today: date | None = None) -> date:
    """First day whose samples are still kept for `table`."""
    today = today or datetime.now(UTC).date()
    spec = next(t for t in TABLES if t.name == table)
    return today - timedelta(days=spec.retention_days())


def known_forget() -> None:
    """Forget the cached partition list (after tables were dropped behind this process)."""
    _known.clear()
