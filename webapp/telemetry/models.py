"""GPU and node samples, the latest sample of each GPU, and their 1-minute rollup.

The sample tables are partitioned by day in PostgreSQL (see the 0001 migration), which Django
cannot create, so their models are unmanaged: Django reads them, `services.py` writes them
with binary COPY. Columns are the metrics of `collectors.schema` in wire order; samples carry
no job id (allocations are joined at query time).
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models

from collectors.schema import GPU_FIELDS, NODE_FIELDS
from webapp.fleet.models import Gpu, Node

# Metrics kept as min / mean / max per GPU and minute, so views of a day or more never scan
# raw samples. Energy keeps the counter's lowest and highest reading in the minute (it is a
# counter: deltas, not means).
ROLLUP_METRICS: tuple[str, ...] = (
    "gpu_util",
    "mem_copy_util",
    "sm_active",
    "tensor_active",
    "fb_used_bytes",
    "power_w",
    "gpu_temp_c",
    "sm_clock_mhz",
)


def _metric_field(kind: str) -> models.Field:
    return models.FloatField(null=True) if kind == "float" else models.BigIntegerField(null=True)


class GpuSample(models.Model):
    pk = models.CompositePrimaryKey("gpu_id", "ts")
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False)
    ts = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "telemetry_gpusample"

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.ts}"


for _m in GPU_FIELDS:
    GpuSample.add_to_class(_m.name, _metric_field(_m.kind))


class GpuLatest(models.Model):
    """The newest sample of each GPU: one row per GPU, upserted by ingest in the same
    transaction as the samples, only when a batch brings a newer ts.

    Pages, `/metrics` and the straggler pass read "now" here, so their cost depends on the
    number of GPUs, never on how much raw data the sample partitions hold. Kept
    apart from the raw samples on purpose: compacting or dropping old raw partitions never
    touches it.
    """

    # Managed, so test flushes empty it with fleet_gpu, but made by SQL (migration 0005): its
    # columns have the samples' types (real, not double) and its pages room for in-place
    # (HOT) updates.
    gpu = models.OneToOneField(Gpu, primary_key=True, on_delete=models.CASCADE, related_name="+")
    ts = models.DateTimeField()

    class Meta:
        db_table = "telemetry_gpulatest"

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} latest @ {self.ts}"


for _m in GPU_FIELDS:
    GpuLatest.add_to_class(_m.name, _metric_field(_m.kind))


class NodeSample(models.Model):
    pk = models.CompositePrimaryKey("node_id", "ts")
    node = models.ForeignKey(Node, on_delete=models.DO_NOTHING, db_constraint=False)
    ts = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "telemetry_nodesample"

    def __str__(self) -> str:
        return f"node {self.node_id} @ {self.ts}"


for _m in NODE_FIELDS:
    NodeSample.add_to_class(_m.name, _metric_field(_m.kind))


class GpuRollup1m(models.Model):
    pk = models.CompositePrimaryKey("gpu_id", "minute")
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False)
    minute = models.DateTimeField()
    n = models.IntegerField()
    energy_mj_min = models.BigIntegerField(null=True)
    energy_mj_max = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "telemetry_gpurollup1m"

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} minute {self.minute}"


for _name in ROLLUP_METRICS:
    GpuRollup1m.add_to_class(f"{_name}_min", models.FloatField(null=True))
    GpuRollup1m.add_to_class(f"{_name}_max", models.FloatField(null=True))
    GpuRollup1m.add_to_class(f"{_name}_sum", models.FloatField(null=True))
    GpuRollup1m.add_to_class(f"{_name}_cnt", models.IntegerField(default=0))


class RollupDirty(models.Model):
    """GPUs and minutes that got new raw samples and wait for their rollup rows.

    Written in the ingest transaction (so it is visible exactly when the samples are) and
    consumed by `rollups_refresh`, which recomputes just those cells.
    """

    gpu_ids = ArrayField(models.BigIntegerField())
    lo = models.DateTimeField()  # first minute touched
    hi = models.DateTimeField()  # end of the last minute touched (exclusive)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{len(self.gpu_ids)} GPUs {self.lo:%H:%M}-{self.hi:%H:%M}"


class GpuSamplePacked(models.Model):
    """The samples of one GPU in one hour, packed losslessly (`packing.py`) by the compaction
    service once the hour is older than VIGIL_COMPACT_AFTER_HOURS. Partitioned by day on
    `hour` (migration 0006), dropped whole with the raw samples' retention."""

    pk = models.CompositePrimaryKey("gpu_id", "hour")
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False)
    hour = models.DateTimeField()
    n = models.IntegerField()
    first_ts = models.DateTimeField()
    last_ts = models.DateTimeField()
    hot = models.BinaryField()  # timestamps, energy_mj and power_w
    data = models.BinaryField()  # the other metrics

    class Meta:
        managed = False
        db_table = "telemetry_gpusamplepacked"

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} hour {self.hour} ({self.n} samples)"


class GpuRollup1h(models.Model):
    """The 1-minute rollup folded into hours (`rollup_hourly.py`), kept for years."""

    pk = models.CompositePrimaryKey("gpu_id", "hour")
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False)
    hour = models.DateTimeField()
    n = models.IntegerField()
    energy_mj_min = models.BigIntegerField(null=True)
    energy_mj_max = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "telemetry_gpurollup1h"

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} hour {self.hour}"


for _name in ROLLUP_METRICS:
    GpuRollup1h.add_to_class(f"{_name}_min", models.FloatField(null=True))
    GpuRollup1h.add_to_class(f"{_name}_max", models.FloatField(null=True))
    GpuRollup1h.add_to_class(f"{_name}_sum", models.FloatField(null=True))
    GpuRollup1h.add_to_class(f"{_name}_cnt", models.IntegerField(default=0))


class CompactDirty(models.Model):
    """GPUs and hours that got raw samples after they may have been compacted (late samples:
    a spool replayed after an outage). Written by ingest in the samples' transaction; the
    compaction service merges those rows into the packed hour and deletes this row in one
    transaction."""

    gpu_ids = ArrayField(models.BigIntegerField())
    lo = models.DateTimeField()  # first hour touched
    hi = models.DateTimeField()  # end of the last hour touched (exclusive)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{len(self.gpu_ids)} GPUs {self.lo:%Y-%m-%d %H}h-{self.hi:%H}h"


class Rollup1hDirty(models.Model):
    """GPUs and hours whose 1-minute rollup changed after the hourly refresh's window (late
    samples); the hourly refresh recomputes those hours and deletes the row."""

    gpu_ids = ArrayField(models.BigIntegerField())
    lo = models.DateTimeField()
    hi = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{len(self.gpu_ids)} GPUs {self.lo:%Y-%m-%d %H}h-{self.hi:%H}h"


class CompactionState(models.Model):
    """Where the compaction pass stands (one row): every hour before `hour` is compacted for
    every GPU, and within `hour` every GPU with an id up to `gpu_after`."""

    hour = models.DateTimeField()
    gpu_after = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"compacted before {self.hour} (and GPUs <= {self.gpu_after} of it)"
