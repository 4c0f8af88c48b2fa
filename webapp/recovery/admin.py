from django.contrib import admin
from django.db import transaction

from webapp.recovery.choices import Mode
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy
from webapp.recovery.services import recovery_actions_stop


@admin.register(RecoveryPolicy)
class RecoveryPolicyAdmin(admin.ModelAdmin):
    list_display = (
        "cluster", "mode", "executor", "max_auto_restarts", "rollback_auto", "updated_by",
        "updated_at",
    )  # fmt: skip
    list_editable = ("mode", "executor", "max_auto_restarts", "rollback_auto")

    def save_model(self, request, obj, form, change):
        obj.updated_by = request.user.get_username()
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if obj.mode == Mode.DRY_RUN:
                recovery_actions_stop(obj.cluster_id, obj.updated_by)


class ActionInline(admin.TabularInline):
    model = RecoveryAction
    fields = ("seq", "kind", "status", "host", "job_scheduler_id", "result", "approved_by")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(RecoveryPlan)
class RecoveryPlanAdmin(admin.ModelAdmin):
    list_display = ("id", "cluster", "kind", "failure", "cause", "action", "mode", "created_at")
    list_filter = ("cluster", "kind", "mode", "action")
    readonly_fields = [f.name for f in RecoveryPlan._meta.fields]
    inlines = [ActionInline]

    def has_add_permission(self, request):
        return False  # plans are made by the policy or by "return to service"


@admin.register(RecoveryAction)
class RecoveryActionAdmin(admin.ModelAdmin):
    list_display = ("id", "cluster", "kind", "status", "host", "job_scheduler_id", "created_at")
    list_filter = ("cluster", "kind", "status", "mode")
    readonly_fields = [f.name for f in RecoveryAction._meta.fields]

    def has_add_permission(self, request):
        return False  # the audit trail is written by the services only
