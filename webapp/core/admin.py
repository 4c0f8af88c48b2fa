from django.contrib import admin

from webapp.core.models import RejectedBatch


@admin.register(RejectedBatch)
class RejectedBatchAdmin(admin.ModelAdmin):
    list_display = ("received_at", "reason", "cluster", "node", "batch_id", "size_bytes")
    list_filter = ("reason",)
    search_fields = ("cluster", "node", "batch_id", "detail")
    date_hierarchy = "received_at"
    # A refused batch is evidence: readable, never edited.
    readonly_fields = [f.name for f in RejectedBatch._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
