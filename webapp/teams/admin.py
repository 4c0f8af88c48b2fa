"""Admin: teams (members are users or groups) and the ordered rules that map jobs to them."""

from django.contrib import admin

from webapp.teams.models import Team, TeamRule


class TeamRuleInline(admin.TabularInline):
    model = TeamRule
    fields = ("order", "field", "pattern", "enabled")
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name",)
    search_fields = ("name", "users__username", "groups__name")
    filter_horizontal = ("users", "groups")
    inlines = [TeamRuleInline]


@admin.register(TeamRule)
class TeamRuleAdmin(admin.ModelAdmin):
    # The order is across all teams (first match wins), so the rules have their own list.
    list_display = ("order", "field", "pattern", "team", "enabled")
    list_display_links = ("pattern",)
    list_editable = ("order", "enabled")
    list_filter = ("team", "field", "enabled")
    list_select_related = ("team",)
