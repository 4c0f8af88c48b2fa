from django.contrib import admin

from webapp.jobs.models import Job, JobAllocation, JobEvent, JobTypeRule
from webapp.jobs.services import type_rules_forget


class JobAllocationInline(admin.TabularInline):
    model = JobAllocation
    fields = ("node", "gpu_index", "gpu", "start", "end")
    readonly_fields = fields
    extra = 0
    can_delete = False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    fields = ("ts", "kind", "state", "exit_code", "detail")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "scheduler_id",
        "cluster",
        "name",
        "user",
        "job_type",
        "state",
        "gpus_requested",
        "submit_at",
        "duration_s",
        "source",
    )
    list_filter = ("cluster", "job_type", "state", "source")
    search_fields = ("scheduler_id", "name", "user", "team")
    date_hierarchy = "submit_at"
    list_select_related = ("cluster",)
    # Jobs are written by the scheduler's events and the trace import; the admin shows them.
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [JobEventInline, JobAllocationInline]
    show_full_result_count = False  # a million imported jobs: no count(*) per page

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(JobTypeRule)
class JobTypeRuleAdmin(admin.ModelAdmin):
    list_display = ("order", "field", "pattern", "job_type", "enabled")
    list_display_links = ("pattern",)
    list_editable = ("order", "enabled")
    list_filter = ("job_type", "field", "enabled")

    # This process sees an edit at once; workers within TYPE_RULES_TTL_S (services.py).
    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        type_rules_forget()

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        type_rules_forget()
