"""Admin: failures (read mostly), GPU error events, log windows, and the review queue of rules
the LLM hook proposed (a human accepts them into rules.yaml under a new id)."""

from __future__ import annotations

from django.contrib import admin, messages

from webapp.failures.models import FailureEvent, GpuErrorEvent, JobLogWindow, ProposedRule
from webapp.failures.services import proposed_rules_review


@admin.register(FailureEvent)
class FailureEventAdmin(admin.ModelAdmin):
    list_display = (
        "occurred_at",
        "cluster",
        "kind",
        "cause",
        "category",
        "action",
        "blamed_host",
        "source",
        "gpu_hours_lost",
    )
    list_filter = ("kind", "category", "source", "cluster")
    search_fields = ("cause", "detail", "blamed_host", "job__scheduler_id")
    raw_id_fields = ("job", "node", "gpu", "gpu_error", "blamed_node", "blamed_gpu")
    date_hierarchy = "occurred_at"


@admin.register(GpuErrorEvent)
class GpuErrorEventAdmin(admin.ModelAdmin):
    list_display = ("ts", "node", "gpu_index", "kind", "xid", "count", "source")
    list_filter = ("kind", "source")
    raw_id_fields = ("node", "gpu")


@admin.register(JobLogWindow)
class JobLogWindowAdmin(admin.ModelAdmin):
    list_display = ("ts", "job_scheduler_id", "node", "path", "first_line_no", "trigger")
    raw_id_fields = ("job", "node")


@admin.register(ProposedRule)
class ProposedRuleAdmin(admin.ModelAdmin):
    list_display = ("created_at", "cause", "pattern", "model", "status", "reviewed_by")
    list_filter = ("status", "cause")
    readonly_fields = ("failure", "model", "example", "created_at", "reviewed_at", "reviewed_by")
    actions = ("accept", "reject")

    @admin.action(description="Accept: to be added to rules.yaml under a new id")
    def accept(self, request, queryset) -> None:
        n = proposed_rules_review(
            queryset.values_list("id", flat=True),
            ProposedRule.Status.ACCEPTED,
            request.user.get_username(),
        )
        self.message_user(
            request,
            f"{n} rule(s) accepted: add them to webapp/failures/rules.yaml (a new id each).",
            messages.SUCCESS,
        )

    @admin.action(description="Reject")
    def reject(self, request, queryset) -> None:
        n = proposed_rules_review(
            queryset.values_list("id", flat=True),
            ProposedRule.Status.REJECTED,
            request.user.get_username(),
        )
        self.message_user(request, f"{n} rule(s) rejected.", messages.SUCCESS)
