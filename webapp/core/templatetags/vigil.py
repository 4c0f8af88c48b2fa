"""Template filters shared by the live pages."""

from __future__ import annotations

import json
from datetime import datetime

from django import template
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

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


@register.filter
def seconds(value: float | None) -> str:
    """A duration for people: 0.4 s, 12 s, 3 min 5 s, 2 h 10 min, 3 d 4 h; '–' when unknown."""
    if value is None:
        return "–"
    value = max(0.0, float(value))
    if value < 10:
        return f"{value:.1f} s"
    if value < 60:
        return f"{value:.0f} s"
    if value < 3600:
        m, s = divmod(round(value), 60)
        return f"{m} min {s} s" if s else f"{m} min"
    if value < 2 * 86400:
        h, rest = divmod(round(value), 3600)
        m = rest // 60
        return f"{h} h {m} min" if m else f"{h} h"
    d, rest = divmod(round(value), 86400)
    h = rest // 3600
    return f"{d} d {h} h" if h else f"{d} d"


@register.filter
def hms(value: float | None) -> str:
    """A duration as a Slurm admin reads it (sacct's Elapsed): 0:04:05, 27:03:00; '–' when
    unknown. Days stay in the hours, so a column sorts and compares at a glance."""
    if value is None:
        return "–"
    h, rest = divmod(max(0, round(float(value))), 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


@register.filter
def elapsed_hms(start: datetime | None, now: datetime | None = None) -> str:
    """How long a running thing has run, as |hms shows a finished one's duration."""
    if start is None:
        return "–"
    return hms(((now or timezone.now()) - start).total_seconds())


@register.filter
def hours(value: float | None, digits: int = 1) -> str:
    """Seconds shown as hours ('GPU-h', 'node-h' columns): 89,184 s -> '24.8'; '–' when
    unknown. The one way a template turns a `_s` quantity into hours, so a column headed in
    hours cannot show seconds."""
    if value is None:
        return "–"
    return f"{float(value) / 3600:,.{int(digits)}f}"


@register.filter
def json_script_fast(value: object, element_id: str) -> str:
    """Django's `json_script` (the same bytes: <, > and & as \\u escapes, so the JSON cannot
    end its script element), escaping with str.replace: json_script's str.translate looks up
    every character in a dict, slow for the megabytes of a node's day of figures."""
    text = (
        json.dumps(value, cls=DjangoJSONEncoder)
        .replace("<", "\\u003C")
        .replace(">", "\\u003E")
        .replace("&", "\\u0026")
    )
    return format_html(
        '<script id="{}" type="application/json">{}</script>', element_id, mark_safe(text)
    )


# --- A GPU, named one way everywhere -------------------------------------------------------


def gpu_name(index: int | None, pci_bus_id: str = "") -> str:
    """ "GPU 3 (0000:3B:00.0)": a GPU by its index on its node and, where known, its PCI bus
    id (what nvidia-smi and the kernel's Xid lines name it by)."""
    name = f"GPU {index if index is not None else '?'}"
    return f"{name} ({pci_bus_id})" if pci_bus_id else name


@register.filter(name="gpu_name")
def gpu_name_of(gpu: object) -> str:
    """A fleet GPU (index, pci_bus_id) as gpu_name() names it; "" for none."""
    if gpu is None or gpu == "":
        return ""
    return gpu_name(getattr(gpu, "index", None), getattr(gpu, "pci_bus_id", "") or "")


@register.simple_tag
def gpu_link(gpu: object, host: bool = False) -> str:
    """The GPU's name linking its page: `{% gpu_link failure.blamed_gpu %}`; `host=True` puts
    its node's hostname first ("gpu-a-01 GPU 3 (0000:3B:00.0)")."""
    from django.urls import reverse

    if gpu is None or gpu == "":
        return ""
    text = gpu_name_of(gpu)
    if host:
        text = f"{gpu.node.hostname} {text}"
    return format_html(
        '<a class="gpu-link" href="{}">{}</a>', reverse("telemetry:gpu", args=[gpu.pk]), text
    )
