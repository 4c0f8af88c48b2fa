from django.contrib import admin

from webapp.evaluation.models import EvaluationJob, EvaluationRun, RuntimeEstimate, SchedulerLatency


class JobInline(admin.TabularInline):
    model = EvaluationJob
    fields = (
        "order",
        "key",
        "kind",
        "node_index",
        "gpu_index",
        "scheduler_id",
        "attempts",
        "status",
        "error",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(EvaluationRun)
class EvaluationRunAdmin(admin.ModelAdmin):
    list_display = ("id", "cluster", "model_path", "plan", "status", "nodes", "gpus_per_node",
                    "predicted_makespan_s", "actual_makespan_s", "requested_by", "created_at")  # fmt: skip
    list_filter = ("cluster", "plan", "status")
    readonly_fields = [f.name for f in EvaluationRun._meta.fields]
    inlines = [JobInline]


@admin.register(RuntimeEstimate)
class RuntimeEstimateAdmin(admin.ModelAdmin):
    """Learned estimates; an operator may correct one (the next run blends into it)."""

    list_display = ("dataset", "load_s", "infer_s", "metrics_s", "runs", "updated_at")
    search_fields = ("dataset",)


@admin.register(SchedulerLatency)
class SchedulerLatencyAdmin(admin.ModelAdmin):
    list_display = ("cluster", "dispatch_s", "dependency_s", "runs", "updated_at")
