from django.contrib import admin

from webapp.fleet.models import Cluster, Gpu, Node


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ("name", "grid_zone", "pue", "created_at")
    search_fields = ("name",)


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ("index", "uuid", "model", "pci_bus_id", "serial", "last_seen")
    readonly_fields = ("uuid", "last_seen")


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("hostname", "cluster", "state", "may_send_job_events", "last_seen", "source")
    list_filter = ("cluster", "state", "source", "may_send_job_events")
    search_fields = ("hostname",)
    list_select_related = ("cluster",)
    # The token is issued by `manage.py issue_node_token`; what is kept of it stays out of
    # sight (a staff user is not the node).
    exclude = ("token_hash", "signing_key_sealed")
    readonly_fields = ("token_issued_at", "last_seen", "created_at")
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("uuid", "node", "index", "model", "released", "first_seen", "last_seen")
    list_filter = ("model", "node__cluster", "released")
    search_fields = ("uuid", "serial", "node__hostname")
    list_select_related = ("node__cluster",)
    readonly_fields = ("first_seen",)
    actions = ["gpus_release"]

    @admin.action(
        description="Moved by hand: let the next node of the cluster reporting them take them"
    )
    def gpus_release(self, request, queryset) -> None:
        count = queryset.update(released=True)
        self.message_user(request, f"{count} GPU(s) will move to the next node that reports them.")
