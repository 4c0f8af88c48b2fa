"""`{% subnav "webapp.alerts.views.TABS" "silences" %}`: an app's sub-navigation from its
declaration in `webapp/core/nav.py`, the current page marked."""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.urls import reverse
from django.utils.module_loading import import_string

from webapp.core.nav import Tabs

register = template.Library()


@register.inclusion_tag("includes/subnav.html", takes_context=True)
def subnav(context: template.Context, path: str, current: str) -> dict:
    tabs = import_string(path)
    if not isinstance(tabs, Tabs):
        raise TypeError(f"{path} is a {type(tabs).__name__}, not Tabs")
    if current not in {t.key for t in tabs.tabs}:
        raise ValueError(f"{path} has no tab {current!r}")
    cluster = context.get("cluster")
    links = []
    for t in tabs.tabs:
        href = reverse(t.url_name)
        if t.keep_cluster and getattr(cluster, "name", None):
            href += "?" + urlencode({"cluster": cluster.name})
        links.append(
            {
                "href": href,
                "text": t.text,
                "id": t.link_id,
                "active": t.key == current,
                "count": t.count() if t.count else 0,
                "count_id": t.count_id,
            }
        )
    return {"label": tabs.label, "links": links}
