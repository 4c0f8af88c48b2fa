"""Template filters shared by the live pages."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def ago(ts: datetime | None, now: datetime | None = None) -> str:
    """How long ago, to the second under a minute: "12 s ago", "14 min ago", "3 h ago"."""
    if ts is None:
        return "never"
    seconds = max(0, int(((now or timezone.now()) - ts).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min ago"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"
