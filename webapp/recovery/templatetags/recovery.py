"""Template tags of the recovery app, for pages of other apps that must not import it (the
failures app: recovery imports failures, so the failure page loads its timeline here).

    {% load recovery %}{% recovery_timeline failure %}   the failure's recovery, with durations
    {% approvals_waiting as n %}                          actions awaiting an operator
"""

from __future__ import annotations

import shlex

from django import template

from webapp.recovery import selectors

register = template.Library()


@register.inclusion_tag("recovery/includes/timeline.html")
def recovery_timeline(failure) -> dict:
    t = selectors.failure_timeline(failure)
    return {"failure": failure, "t": t, "plan": t.plan}


@register.simple_tag
def approvals_waiting() -> int:
    return selectors.approvals_waiting()


@register.filter
def shell(argv) -> str:
    """A command as a shell would take it: `Reason="vigil: x"` stays one argument."""
    return shlex.join(str(a) for a in argv)


@register.filter
def action_title(action) -> str:
    return selectors.action_title(action)
