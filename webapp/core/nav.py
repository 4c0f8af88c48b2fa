"""Sub-navigation: an app's pages as tabs, declared once beside its views and drawn by one
include, `templates/includes/subnav.html` (`{% subnav "webapp.alerts.views.TABS" "silences" %}`
from `webapp/core/templatetags/vigil_nav.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Tab:
    """One page: `key` names it to the template that marks it current; `url_name` is reversed
    for its link. `count` gives a number shown beside the text when not zero (what waits
    there); `keep_cluster` carries the page's chosen cluster into the link."""

    key: str
    url_name: str
    text: str
    link_id: str = ""
    count: Callable[[], int] | None = None
    count_id: str = ""
    keep_cluster: bool = False


@dataclass(frozen=True)
class Tabs:
    """An app's pages in order; `label` names the navigation for screen readers."""

    label: str
    tabs: tuple[Tab, ...]

    def __post_init__(self) -> None:
        keys = [t.key for t in self.tabs]
        if not keys or len(set(keys)) != len(keys):
            raise ValueError(f"{self.label}: tabs need distinct keys, got {keys}")
