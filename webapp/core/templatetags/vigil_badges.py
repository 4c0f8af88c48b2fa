"""`<span class="badge {{ status|tone }}">`: a status's badge colour from one tone scheme (ok,
warn, bad, info; the classes are in `static/base.css`), whatever app the status comes from."""

from __future__ import annotations

from django import template

register = template.Library()

# The statuses of every app's badges by tone: done or healthy, in progress or waiting on
# someone, failed or lost, and a marker that says what kind of thing a row is. A status not
# listed shows neutral (planned, skipped, not run).
_TONES = {
    "ok": ("succeeded", "completed", "done", "resolved", "sent", "up", "enabled", "active"),
    "warn": (
        "pending",
        "waiting",
        "awaiting_approval",
        "ready",
        "running",
        "submitted",
        "sending",
        "retry",
        "partial",
        "draining",
        "drained",
        "warning",
    ),
    "bad": ("failed", "firing", "critical", "down", "disabled", "cancelled", "rejected"),
    "info": ("info", "simulated"),
}
TONE_OF = {status: tone for tone, statuses in _TONES.items() for status in statuses}
# A critical alert (it pages someone) stands out from the other bad ones: filled.
TONE_OF["critical"] = "bad strong"


@register.filter
def tone(status: object) -> str:
    """The badge class of a status (a choice's value, or a bool for on / off)."""
    if isinstance(status, bool):
        return "ok" if status else ""
    return TONE_OF.get(str(status), "")
