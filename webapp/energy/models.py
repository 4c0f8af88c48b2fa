"""Energy and carbon tables.

Carbon side (this module's first half): per-cluster carbon settings, the dated PUE table,
contractual (market-based) emission factors, imported hourly grid-intensity series and node
power profiles for clusters without measured server power. The yearly country table is a
shipped data file (`data/grid_intensity.csv`), not a table: it is read-only reference data
with its source and year per row.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q

from webapp.energy.choices import ExportKind, ExportStatus, PueBasis, ReportDeliveryStatus
from webapp.fleet.models import Cluster


class ClusterCarbonSettings(models.Model):
    """Where a cluster draws its electricity from, and an optional fixed intensity."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, primary_key=True, related_name="carbon_settings"
    )
    # An Electricity Maps zone id ("FR", "DE", "SE-SE3", "US-CAL-CISO") or a row of the shipped
    # table ("US-CA"); blank: the fleet cluster's `grid_zone`.
    grid_zone = models.CharField(max_length=64, blank=True, default="")
    # Per-site override (docs/energy-carbon.md §4, first in the order of sources), e.g. a utility's
    # published factor for the site's supply contract area.
    intensity_override_g_per_kwh = models.FloatField(null=True, blank=True)
    intensity_override_source = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "cluster carbon settings"
        verbose_name_plural = "cluster carbon settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(intensity_override_g_per_kwh__isnull=True)
                | Q(intensity_override_g_per_kwh__gte=0),
                name="energy_settings_override_nonneg",
            ),
            models.CheckConstraint(
                condition=Q(intensity_override_g_per_kwh__isnull=True)
                | ~Q(intensity_override_source=""),
                name="energy_settings_override_has_source",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}: {self.grid_zone or self.cluster.grid_zone or '(no zone)'}"


def period_constraints(prefix: str) -> list[models.BaseConstraint]:
    """What a cluster's [since, until) period holds (PUE, market factor): it ends after it
    starts, and one starts at a time."""
    return [
        models.CheckConstraint(
            condition=Q(until__isnull=True) | Q(until__gt=F("since")),
            name=f"{prefix}_until_after_since",
        ),
        models.UniqueConstraint(fields=["cluster", "since"], name=f"{prefix}_unique_since"),
    ]


class PuePeriod(models.Model):
    """The PUE of a cluster's facility over [since, until); until null = still valid."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pue_periods")
    since = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True)
    value = models.FloatField()
    basis = models.CharField(max_length=16, choices=PueBasis.choices)
    source = models.CharField(max_length=200, help_text="Who measured or stated it, and how.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster_id", "since"]
        verbose_name = "PUE period"
        constraints = [
            # PUE is total facility energy over IT energy: 1.0 or more by definition (ISO/IEC
            # 30134-2); 3 is far above any survey value (Uptime 2023 average 1.58).
            models.CheckConstraint(
                condition=Q(value__gte=1.0) & Q(value__lte=3.0), name="energy_pue_range"
            ),
            *period_constraints("energy_pue"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name} PUE {self.value} since {self.since:%Y-%m-%d}"


class MarketFactorPeriod(models.Model):
    """A contractual emission factor (market-based accounting) over [since, until)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="market_factors")
    since = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True)
    kg_per_kwh = models.FloatField()
    source = models.CharField(
        max_length=200, help_text="The contract or certificate (PPA, REC/GO, supplier mix)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster_id", "since"]
        constraints = [
            models.CheckConstraint(condition=Q(kg_per_kwh__gte=0), name="energy_market_nonneg"),
            *period_constraints("energy_market"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name} {self.kg_per_kwh} kg/kWh since {self.since:%Y-%m-%d}"


class IntensityDataset(models.Model):
    """One imported file of hourly grid intensity (e.g. an Electricity Maps CSV export)."""

    name = models.CharField(max_length=200, unique=True)
    zone = models.CharField(max_length=64)
    file_format = models.CharField(max_length=32)
    # Which of the file's columns was stored: "lca" (life-cycle, as the yearly table) or
    # "direct" (combustion only).
    basis = models.CharField(max_length=16)
    first_hour = models.DateTimeField()
    last_hour = models.DateTimeField()
    hours = models.PositiveIntegerField()
    imported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["zone", "first_hour"]

    def __str__(self) -> str:
        return self.name


class IntensityHour(models.Model):
    """The grid's carbon intensity for one zone over the hour starting at `hour` (UTC)."""

    dataset = models.ForeignKey(IntensityDataset, on_delete=models.CASCADE, related_name="rows")
    zone = models.CharField(max_length=64)
    hour = models.DateTimeField()
    g_per_kwh = models.FloatField()

    class Meta:
        ordering = ["zone", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["zone", "hour"], name="energy_intensity_zone_hour"),
            models.CheckConstraint(condition=Q(g_per_kwh__gte=0), name="energy_intensity_nonneg"),
        ]

    def __str__(self) -> str:
        return f"{self.zone} {self.hour:%Y-%m-%d %H:00} {self.g_per_kwh} g/kWh"


class NodePowerProfile(models.Model):
    """The non-GPU power of a cluster's nodes, for nodes that report no measured power.

    Matched by hostname prefix (longest wins; blank matches every node of the cluster). With
    no CPU TDP the model falls back to server = 1.5 x GPU power (docs/energy-carbon.md §2).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="power_profiles")
    name = models.CharField(max_length=64)
    hostname_prefix = models.CharField(max_length=128, blank=True, default="")
    cpu_tdp_w = models.FloatField(null=True, blank=True, help_text="TDP of one CPU socket.")
    cpu_sockets = models.PositiveSmallIntegerField(default=2)
    memory_gb = models.FloatField(null=True, blank=True)
    # Fans, NICs, disks, BMC: everything but CPUs, memory and GPUs, before PSU losses.
    other_w = models.FloatField(default=0.0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster_id", "hostname_prefix"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "hostname_prefix"], name="energy_profile_unique_prefix"
            ),
            models.CheckConstraint(
                condition=Q(cpu_tdp_w__isnull=True) | Q(cpu_tdp_w__gt=0),
                name="energy_profile_tdp_positive",
            ),
            models.CheckConstraint(condition=Q(other_w__gte=0), name="energy_profile_other_nonneg"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.hostname_prefix or '*'}: {self.name}"


# --- Energy side: hourly GPU and node energy rollups (webapp/energy/rollups.py) --------------
#
# Written with COPY by the rollup refresh, replaced per (GPU, hour) or (node, hour); no
# database-level foreign keys (like the telemetry samples: rows of a deleted GPU are harmless
# and a per-row check would slow the refresh). Energy is in joules per method, so every
# figure can say how much of it was measured.


def unchecked_fk(to: type[models.Model] | str, **kwargs) -> models.ForeignKey:
    """A rollup row's reference, without a database constraint (see above)."""
    return models.ForeignKey(
        to, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", **kwargs
    )


class GpuEnergyHour(models.Model):
    """The energy one GPU used in one hour while one job held it (job null: no job did)."""

    cluster = unchecked_fk(Cluster)
    node = unchecked_fk("fleet.Node")
    gpu = unchecked_fk("fleet.Gpu")
    hour = models.DateTimeField()
    job = unchecked_fk("jobs.Job", null=True, blank=True)
    counter_j = models.FloatField(default=0)  # NVML counter deltas
    integrated_j = models.FloatField(default=0)  # power integrated (no usable counter)
    model_j = models.FloatField(default=0)  # estimated from utilization
    covered_s = models.FloatField(default=0)  # seconds with an energy (completeness)
    idle_j = models.FloatField(default=0)  # intervals under VIGIL_BUSY_UTIL_PCT
    idle_s = models.FloatField(default=0)
    samples = models.IntegerField(default=0)  # intervals ending in this row
    # Raw samples of the whole GPU-hour when it was computed: the refresh compares it with the
    # 1-minute rollup's count to find GPU-hours that got new samples.
    hour_samples = models.IntegerField(default=0)
    computed_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["cluster", "hour"], name="gpuenergy_cluster_hour"),
            models.Index(fields=["gpu", "hour"], name="gpuenergy_gpu_hour"),
            models.Index(fields=["job"], name="gpuenergy_job"),
        ]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.hour:%Y-%m-%d %H}h job {self.job_id}"

    @property
    def energy_j(self) -> float:
        return self.counter_j + self.integrated_j + self.model_j


class JobEnergyHour(models.Model):
    """A cluster's GPU energy of one hour per job (job null: GPUs no job held): the sums of
    that hour's GpuEnergyHour rows, rewritten whenever any of them is, so the monthly report
    reads a row per job-hour (tens of thousands a month) instead of one per GPU-hour."""

    cluster = unchecked_fk(Cluster)
    hour = models.DateTimeField()
    job = unchecked_fk("jobs.Job", null=True, blank=True)
    gpus = models.IntegerField(default=0)
    counter_j = models.FloatField(default=0)
    integrated_j = models.FloatField(default=0)
    model_j = models.FloatField(default=0)
    covered_s = models.FloatField(default=0)
    idle_j = models.FloatField(default=0)
    idle_s = models.FloatField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["cluster", "hour"], name="jobenergy_cluster_hour"),
            models.Index(fields=["job"], name="jobenergy_job"),
        ]

    def __str__(self) -> str:
        return f"cluster {self.cluster_id} {self.hour:%Y-%m-%d %H}h job {self.job_id}"


class NodeEnergyHour(models.Model):
    """A node's IT energy in one hour: IPMI server power where measured, the node power model
    (webapp/energy/carbon.py) for the rest of the time its GPUs were accounted."""

    cluster = unchecked_fk(Cluster)
    node = unchecked_fk("fleet.Node")
    hour = models.DateTimeField()
    ipmi_j = models.FloatField(default=0)
    ipmi_s = models.FloatField(default=0)
    model_j = models.FloatField(default=0)
    gpu_j = models.FloatField(default=0)  # the node's GPUs, all methods (from GpuEnergyHour)
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "hour"], name="nodeenergy_unique"),
        ]
        indexes = [models.Index(fields=["cluster", "hour"], name="nodeenergy_cluster_hour")]

    def __str__(self) -> str:
        return f"node {self.node_id} {self.hour:%Y-%m-%d %H}h"

    @property
    def it_j(self) -> float:
        return self.ipmi_j + self.model_j


def default_timezone() -> str:
    """A new recipient's timezone: the site's TIME_ZONE, else UTC."""
    return settings.TIME_ZONE or "UTC"


def validate_timezone(name: str) -> None:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"{name!r} is not an IANA timezone (e.g. Europe/Paris, Asia/Shanghai, UTC)"
        ) from None


class EnergyReportSubscription(models.Model):
    """Who gets the monthly energy report by email: an alerts email channel (its address,
    its disabled flag), for some clusters (none chosen: every cluster), on the report day in
    the recipient's own timezone."""

    channel = models.ForeignKey(
        "alerts.Channel", on_delete=models.CASCADE, related_name="energy_report_subscriptions"
    )
    clusters = models.ManyToManyField(Cluster, blank=True, related_name="+")
    active = models.BooleanField(default=True)
    timezone = models.CharField(
        max_length=64,
        default=default_timezone,
        validators=[validate_timezone],
        help_text="The recipient's IANA timezone: the report is sent on the report day there.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"energy report to {self.channel.target}"


class EnergyReportDelivery(models.Model):
    """One report email (a subscription, a cluster, a month), written before it is sent: the
    run record, and what keeps a month from being sent twice."""

    Status = ReportDeliveryStatus  # the name the app's code reads it by

    subscription = models.ForeignKey(
        EnergyReportSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    month = models.CharField(max_length=7)  # YYYY-MM
    to = models.CharField(max_length=512)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.CharField(max_length=1024, blank=True, default="")
    pdf_bytes = models.PositiveIntegerField(default=0)
    # The worker sending it, until when (core/workrows.py): one that died is replaced then.
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "energy report deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "cluster", "month"], name="energyreport_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.month} {self.cluster_id} to {self.to}: {self.status}"


class EnergyMonthVersion(models.Model):
    """How many times the rollup has rewritten hours of a cluster's month (bumped in the
    transaction that rewrites them): what is computed from the month (its cached report, its
    exports) is current while the version it was computed from is."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    month = models.CharField(max_length=7)  # YYYY-MM (UTC)
    version = models.PositiveBigIntegerField(default=0)
    changed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "month"], name="energymonthversion_once")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.month}: version {self.version}"


class EnergyExport(models.Model):
    """A month's file built by a Celery task (webapp/energy/tasks.py build_export): the daily
    CSV (one row per day x team x account x project x job type), delivered as a link, or the
    printed monthly report (the PDF: Chromium runs in a worker, never in a web request). The
    run record (who asked, when, status, error) and the file, gzip-compressed. One build per
    month, kind and data: asking again returns the pending or finished one."""

    Status = ExportStatus  # the names the app's code reads them by
    Kind = ExportKind

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    month = models.CharField(max_length=7)  # YYYY-MM (UTC)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DAILY_CSV)
    # The data it is built from (selectors.data_version): a finished export of the same
    # version is the same file.
    data_version = models.CharField(max_length=256, blank=True, default="")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.CharField(max_length=1024, blank=True, default="")
    rows = models.PositiveIntegerField(default=0)
    file_gz = models.BinaryField(null=True, blank=True, editable=False)
    file_bytes = models.PositiveIntegerField(default=0)  # uncompressed
    emailed_to = models.CharField(max_length=254, blank=True, default="")
    # The worker building it, until when (core/workrows.py): one that died is replaced then.
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["cluster", "-created_at"], name="energyexport_recent"),
            models.Index(fields=["cluster", "month", "kind"], name="energyexport_month"),
        ]

    def __str__(self) -> str:
        return f"energy {self.kind} {self.cluster_id} {self.month}: {self.status}"

    @property
    def filename(self) -> str:
        if self.kind == self.Kind.REPORT_PDF:
            return f"vigil-energy-{self.cluster.name}-{self.month}.pdf"
        return f"vigil-energy-{self.cluster.name}-{self.month}-daily.csv"

    @property
    def content_type(self) -> str:
        if self.kind == self.Kind.REPORT_PDF:
            return "application/pdf"
        return "text/csv; charset=utf-8"
