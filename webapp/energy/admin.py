from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from webapp.energy.carbon_services import period_check
from webapp.energy.models import (
    ClusterCarbonSettings,
    IntensityDataset,
    MarketFactorPeriod,
    NodePowerProfile,
    PuePeriod,
)


@admin.register(ClusterCarbonSettings)
class ClusterCarbonSettingsAdmin(admin.ModelAdmin):
    list_display = (
        "cluster",
        "grid_zone",
        "intensity_override_g_per_kwh",
        "intensity_override_source",
        "updated_at",
    )


class PeriodForm(forms.ModelForm):
    """The overlap rule of `manage.py energy_pue`, so the admin cannot bypass it."""

    def clean(self):
        cleaned = super().clean()
        if not self.errors:
            try:
                period_check(self.instance.__class__(pk=self.instance.pk, **cleaned))
            except ValidationError as e:
                raise ValidationError(e.messages) from None
        return cleaned


@admin.register(PuePeriod)
class PuePeriodAdmin(admin.ModelAdmin):
    form = PeriodForm
    list_display = ("cluster", "since", "until", "value", "basis", "source")
    list_filter = ("cluster", "basis")


@admin.register(MarketFactorPeriod)
class MarketFactorPeriodAdmin(admin.ModelAdmin):
    form = PeriodForm
    list_display = ("cluster", "since", "until", "kg_per_kwh", "source")
    list_filter = ("cluster",)


@admin.register(IntensityDataset)
class IntensityDatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "zone", "file_format", "basis", "first_hour", "last_hour", "hours")
    list_filter = ("zone",)
    readonly_fields = [f.name for f in IntensityDataset._meta.fields]

    def has_add_permission(self, request):
        return False  # series come in through `manage.py grid_import`


@admin.register(NodePowerProfile)
class NodePowerProfileAdmin(admin.ModelAdmin):
    list_display = (
        "cluster",
        "name",
        "hostname_prefix",
        "cpu_tdp_w",
        "cpu_sockets",
        "memory_gb",
        "other_w",
    )
    list_filter = ("cluster",)


# --- Energy side: who gets the monthly report, and what was sent -------------------------------

from webapp.energy.models import (  # noqa: E402
    EnergyExport,
    EnergyReportDelivery,
    EnergyReportSubscription,
)


@admin.register(EnergyReportSubscription)
class EnergyReportSubscriptionAdmin(admin.ModelAdmin):
    list_display = ("channel", "timezone", "active", "created_at")
    list_filter = ("active", "timezone")
    filter_horizontal = ("clusters",)


@admin.register(EnergyReportDelivery)
class EnergyReportDeliveryAdmin(admin.ModelAdmin):
    list_display = ("month", "cluster", "to", "status", "sent_at", "error")
    list_filter = ("status", "month", "cluster")
    readonly_fields = [f.name for f in EnergyReportDelivery._meta.fields]

    def has_add_permission(self, request):
        return False  # written by the monthly report task


@admin.register(EnergyExport)
class EnergyExportAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "cluster",
        "month",
        "kind",
        "requested_by",
        "status",
        "rows",
        "error",
    )
    list_filter = ("status", "kind", "cluster")
    exclude = ("file_gz",)
    readonly_fields = [f.name for f in EnergyExport._meta.fields if f.name != "file_gz"]

    def has_add_permission(self, request):
        return False  # asked for on the energy page, built by a task
