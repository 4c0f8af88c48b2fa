from django.db import models


class RejectedBatch(models.Model):
    """A batch refused whole, with the reason; the count per reason is the rejection counter.

    Every ingest path records its refusals here (samples, node events, job events over the
    broker or the HTTP API), so the table lives in core. Its table keeps the name it had when
    it belonged to telemetry, so upgrading moves no data.
    """

    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    reason = models.CharField(max_length=32, db_index=True)
    detail = models.TextField()
    cluster = models.CharField(max_length=128, blank=True, default="")
    node = models.CharField(max_length=128, blank=True, default="")
    batch_id = models.CharField(max_length=64, blank=True, default="")
    size_bytes = models.IntegerField(default=0)

    class Meta:
        db_table = "telemetry_rejectedbatch"
        ordering = ["-received_at"]
        verbose_name = "refused batch"
        verbose_name_plural = "refused batches"

    def __str__(self) -> str:
        return f"{self.reason} {self.cluster}/{self.node}"


class RejectedBatchPruned(models.Model):
    """Refusals pruned past their retention, counted by reason: `/metrics` adds them to the rows
    still kept, so the rejection counter never goes down (Prometheus would read a reset)."""

    reason = models.CharField(max_length=32, primary_key=True)
    count = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "pruned refusals count"
        verbose_name_plural = "pruned refusals counts"

    def __str__(self) -> str:
        return f"{self.reason}: {self.count} pruned"
