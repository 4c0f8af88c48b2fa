from django.contrib import admin

from webapp.alerts.models import (
    Alert,
    AlertRule,
    Channel,
    Notification,
    OutboxMessage,
    Silence,
    Subscription,
)


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    """Where an operator tunes the rules (limits, windows, severities, timers)."""

    list_display = (
        "name",
        "kind",
        "enabled",
        "severity",
        "threshold",
        "for_s",
        "group_wait_s",
        "group_interval_s",
        "repeat_interval_s",
    )
    list_editable = ("enabled", "severity", "threshold", "for_s")
    list_filter = ("kind", "enabled", "severity")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("id", "rule", "severity", "state", "summary", "cluster", "starts_at", "ends_at")
    list_filter = ("state", "severity", "rule", "cluster")
    search_fields = ("summary", "fingerprint")
    readonly_fields = [f.name for f in Alert._meta.fields]

    def has_add_permission(self, request):
        return False  # alerts are raised by the rules


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    list_display = ("id", "cluster", "node", "cause", "team", "starts_at", "ends_at", "created_by")
    list_filter = ("cluster",)

    def save_model(self, request, obj, form, change):
        if not obj.created_by:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "name", "user", "team", "disabled", "last_error")
    list_filter = ("kind", "disabled")


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ("id", "user", "team", "channel", "scope", "severities", "active")
    list_filter = ("scope", "active")


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("id", "channel", "kind", "status", "to", "subject", "created_at", "sent_at")
    list_filter = ("status", "kind")
    readonly_fields = [f.name for f in Notification._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    list_display = ("id", "to", "subject", "created_at")
    readonly_fields = [f.name for f in OutboxMessage._meta.fields]
