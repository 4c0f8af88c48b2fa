"""Alerts pages: alerts firing and resolved (silence from a row), silences, channels and one's
own subscriptions, the delivery log, the unsubscribe link's page and the demo's outbox; every
table has a CSV export (api_urls.py).

Who sees what: every logged-in user sees the alerts and silences (a job's metadata and
diagnosis are public inside Vigil, teams/selectors.py); a message's text may carry a job's log
lines, so the delivery log lists only attempts to the viewer's own or their teams' channels and
the outbox (whole messages) is for operators. Operators silence anything; a team member
silences their own team's alerts only (a silence naming their team, which mutes that team's
recipients and never an operator's alert about the hardware or recovery). Only a silence's
author or an operator expires it.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from webapp.alerts import selectors, services, tables
from webapp.alerts.choices import AlertState, NotificationStatus, Severity, SubscriptionScope
from webapp.alerts.forms import (
    AlertFilterForm,
    DeliveryFilterForm,
    SilenceForm,
    SubscriptionForm,
    silence_default_until,
)
from webapp.alerts.models import Alert, AlertRule, Channel, OutboxMessage, Silence, Subscription
from webapp.core.nav import Tab, Tabs
from webapp.core.views import UnsubscribePage
from webapp.failures.selectors import reported_late_s
from webapp.fleet.models import Cluster
from webapp.teams.models import Team
from webapp.teams.selectors import user_is_operator

ALERTS_PER_PAGE = 50
DELIVERIES_PER_PAGE = 50
SILENCES_SHOWN = 200  # the newest; the CSV has up to CSV_MAX_ROWS
OUTBOX_SHOWN = 200
CSV_MAX_ROWS = 100_000

# The alerts pages' sub-navigation (`{% subnav "webapp.alerts.views.TABS" "alerts" %}`).
TABS = Tabs(
    "alerts pages",
    (
        Tab("alerts", "alerts:list", "Alerts"),
        Tab("silences", "alerts:silences", "Silences"),
        Tab("channels", "alerts:channels", "Channels & subscriptions"),
        Tab("deliveries", "alerts:deliveries", "Delivery log"),
        Tab("outbox", "alerts:outbox", "Outbox", link_id="outbox-link"),
    ),
)

OPERATORS_ONLY = "Only operators may do this."
OUTBOX_OPERATORS_ONLY = "The outbox shows whole emails (with log lines): operators only."


def _query_without_page(request: HttpRequest) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


# --- alerts ----------------------------------------------------------------------------------


def _silence_link(alert: Alert, *, operator: bool) -> str:
    """The silence form, pre-filled with what identifies this alert's incident. A member's
    names their team (it mutes that team's recipients only); an operator's names none, so it
    mutes everyone."""
    fields = {
        "cluster": alert.cluster.name if alert.cluster else "",
        "node": alert.node.hostname if alert.node else "",
        "cause": alert.cause,
        "team": "" if operator else alert.team_id or "",
    }
    return reverse("alerts:silences") + "?" + urlencode({k: v for k, v in fields.items() if v})


def _since(alert: Alert) -> tuple[datetime | None, int | None]:
    """When the alert's trouble began, as its email says: a failure's occurrence, with the
    minutes it was reported after that when it was not detected live (a replay, an agent cut
    off); else the alert's own start."""
    if alert.failure_id is None:
        return alert.starts_at, None
    late_s = reported_late_s(alert.failure)
    return alert.failure.occurred_at, round(late_s / 60) if late_s is not None else None


def alert_list(request: HttpRequest) -> HttpResponse:
    form = AlertFilterForm(request.GET)
    page = Paginator(selectors.alerts_filter(**form.filters), ALERTS_PER_PAGE).get_page(
        form.values["page"]
    )
    operator = user_is_operator(request.user)
    teams = selectors.team_ids_of(request.user)
    rows = [
        (
            a,
            _silence_link(a, operator=operator)
            if operator or (a.team_id and a.team_id in teams)
            else None,
            *_since(a),
        )
        for a in page
    ]
    return render(
        request,
        "alerts/list.html",
        {
            "page": page,
            "rows": rows,
            "filters": form.filters,
            "error": form.error,
            "query": _query_without_page(request),
            "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
            "rules": AlertRule.objects.order_by("name").values_list("name", flat=True),
            "states": AlertState.choices,
            "severities": Severity.choices,
            "AlertState": AlertState,
        },
    )


def alert_list_csv(request: HttpRequest) -> HttpResponse:
    qs = selectors.alerts_filter(**AlertFilterForm(request.GET).filters)[:CSV_MAX_ROWS]
    return tables.ALERTS.csv_response("alerts.csv", qs.iterator(chunk_size=2000))


# --- silences --------------------------------------------------------------------------------


def _silenceable_teams(user, operator: bool):
    """Teams whose alerts this user may silence: all for an operator, else their own."""
    teams = Team.objects.order_by("name")
    return teams if operator else teams.filter(pk__in=selectors.team_ids_of(user))


def _may_expire(silence: Silence, operator: bool, username: str) -> bool:
    """Its author or an operator: a member cannot end a silence another member (or an
    operator) set."""
    return operator or silence.created_by == username


def silence_list(request: HttpRequest) -> HttpResponse:
    """GET: the silences and a form (pre-filled from the query, as a row's link does);
    POST: create one, as the user."""
    operator = user_is_operator(request.user)
    teams = _silenceable_teams(request.user, operator)
    team_ids = selectors.team_ids_of(request.user)
    may_create = operator or bool(team_ids)
    error, status = None, 200
    if request.method == "POST":
        if not may_create:
            return HttpResponseForbidden(
                "Only operators and team members may silence alerts.", content_type="text/plain"
            )
        form = SilenceForm(request.POST, teams=teams, team_required=not operator)
        if form.is_valid():
            d = form.cleaned_data
            try:
                silence = services.silence_create(
                    user=request.user.get_username(),
                    comment=d["why"],
                    ends_at=d["until"],
                    starts_at=d["start"],
                    cluster=d["cluster"],
                    node=d["node"],
                    cause=d["cause"],
                    team_id=d["team"].pk if d["team"] else None,
                )
            except services.AlertsError as exc:
                error = str(exc)
            else:
                return redirect(reverse("alerts:silences") + f"?created={silence.pk}")
        else:
            error = form.error
        status = 400
    else:
        initial = {
            k: request.GET[k] for k in ("cluster", "node", "cause", "team") if k in request.GET
        }
        initial["until"] = silence_default_until()
        form = SilenceForm(initial=initial, teams=teams, team_required=not operator)
    silences = list(selectors.silences_visible()[:SILENCES_SHOWN])
    now = timezone.now()
    return render(
        request,
        "alerts/silences.html",
        {
            "form": form,
            "error": error,
            "may_create": may_create,
            "created": request.GET.get("created"),
            "rows": [
                (
                    s,
                    s.starts_at <= now < s.ends_at,
                    _may_expire(s, operator, request.user.get_username()),
                )
                for s in silences
            ],
            "prefilled": any(k in request.GET for k in ("cluster", "node", "cause", "team")),
        },
        status=status,
    )


@require_POST
def silence_expire(request: HttpRequest, silence_id: int) -> HttpResponse:
    silence = get_object_or_404(Silence, pk=silence_id)
    operator = user_is_operator(request.user)
    if not _may_expire(silence, operator, request.user.get_username()):
        return HttpResponseForbidden(
            "Only operators and the silence's author may expire it.",
            content_type="text/plain",
        )
    services.silence_expire(silence.pk, request.user.get_username())
    return redirect("alerts:silences")


def silence_list_csv(request: HttpRequest) -> HttpResponse:
    silences = selectors.silences_visible()[:CSV_MAX_ROWS].iterator(chunk_size=2000)
    return tables.SILENCES.csv_response("silences.csv", silences)


# --- channels and subscriptions --------------------------------------------------------------


def channel_list(request: HttpRequest, *, form: SubscriptionForm | None = None) -> HttpResponse:
    """The user's own subscriptions (with a form to add one) and the channels they may see."""
    operator = user_is_operator(request.user)
    return render(
        request,
        "alerts/channels.html",
        {
            "subscriptions": list(selectors.subscriptions_of(request.user)),
            "channels": list(selectors.channels_visible(request.user)),
            "operator": operator,
            "form": form or SubscriptionForm(),
            "error": form.error if form is not None else None,
            "has_email": bool(request.user.email),
            "SubscriptionScope": SubscriptionScope,
        },
        status=400 if form is not None else 200,
    )


def _subscription_args(form: SubscriptionForm) -> dict:
    return {
        "clusters": list(form.cleaned_data["clusters"]),
        "severities": form.cleaned_data["severities"],
    }


@require_POST
def subscription_create(request: HttpRequest) -> HttpResponse:
    form = SubscriptionForm(request.POST)
    if form.is_valid():
        try:
            services.subscription_create(request.user, **_subscription_args(form))
        except services.AlertsError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("alerts:channels")
    return channel_list(request, form=form)


def subscription_edit(request: HttpRequest, subscription_id: int) -> HttpResponse:
    """One of the user's own subscriptions (anyone else's is not found)."""
    sub = get_object_or_404(
        Subscription.objects.select_related("channel").prefetch_related("clusters"),
        pk=subscription_id,
        user=request.user,
    )
    if request.method == "POST":
        form = SubscriptionForm(request.POST)
        if form.is_valid():
            services.subscription_update(
                request.user, sub.pk, active=form.cleaned_data["active"], **_subscription_args(form)
            )
            return redirect("alerts:channels")
        status = 400
    else:
        form = SubscriptionForm(
            initial={
                "clusters": [c.name for c in sub.clusters.all()],
                "severities": sub.severities,
                "active": sub.active,
            }
        )
        status = 200
    return render(
        request,
        "alerts/subscription.html",
        {"sub": sub, "form": form, "error": form.error if status == 400 else None},
        status=status,
    )


@require_POST
def subscription_delete(request: HttpRequest, subscription_id: int) -> HttpResponse:
    get_object_or_404(Subscription, pk=subscription_id, user=request.user)
    services.subscription_delete(request.user, subscription_id)
    return redirect("alerts:channels")


@require_POST
def channel_enable(request: HttpRequest, channel_id: int) -> HttpResponse:
    if not user_is_operator(request.user):
        return HttpResponseForbidden(OPERATORS_ONLY, content_type="text/plain")
    get_object_or_404(Channel, pk=channel_id)
    services.channel_enable(channel_id)
    return redirect("alerts:channels")


def channel_list_csv(request: HttpRequest) -> HttpResponse:
    channels = selectors.channels_visible(request.user)[:CSV_MAX_ROWS]
    return tables.CHANNELS.csv_response("channels.csv", channels)


def subscription_list_csv(request: HttpRequest) -> HttpResponse:
    return tables.SUBSCRIPTIONS.csv_response(
        "subscriptions.csv", selectors.subscriptions_of(request.user)
    )


# --- delivery log ----------------------------------------------------------------------------


def _deliveries(request: HttpRequest):
    form = DeliveryFilterForm(request.GET)
    qs = selectors.notifications_visible(request.user, channel_id=form.values["channel"])
    if form.values["status"]:
        qs = qs.filter(status=form.values["status"])
    return form, qs


def delivery_list(request: HttpRequest) -> HttpResponse:
    form, qs = _deliveries(request)
    page = Paginator(qs, DELIVERIES_PER_PAGE).get_page(form.values["page"])
    return render(
        request,
        "alerts/deliveries.html",
        {
            "page": page,
            "filters": form.values,
            "error": form.error,
            "query": _query_without_page(request),
            "statuses": NotificationStatus.choices,
        },
    )


def delivery_list_csv(request: HttpRequest) -> HttpResponse:
    _, qs = _deliveries(request)
    return tables.DELIVERIES.csv_response(
        "deliveries.csv", qs[:CSV_MAX_ROWS].iterator(chunk_size=2000)
    )


# --- unsubscribe (the page is core's; no login: the signed token is the proof) --------------


def _subscription_what(sub: Subscription) -> str:
    what = sub.get_scope_display()
    return f"{what} ({', '.join(sub.severities)})" if sub.severities else what


UNSUBSCRIBE_PAGE = UnsubscribePage(
    purpose=services.UNSUBSCRIBE_PURPOSE,
    title="Vigil alerts",
    find=lambda pk: (
        Subscription.objects.select_related("channel", "user", "team").filter(pk=pk).first()
    ),
    turn_off=services.subscription_turn_off,
    what=_subscription_what,
    note="Your other subscriptions stay as they are.",
)


# --- the demo's outbox -----------------------------------------------------------------------


def _forbidden_outbox() -> HttpResponse:
    return HttpResponseForbidden(OUTBOX_OPERATORS_ONLY, content_type="text/plain")


def outbox(request: HttpRequest) -> HttpResponse:
    if not user_is_operator(request.user):
        return _forbidden_outbox()
    messages = OutboxMessage.objects.defer("body_text", "body_html")
    return render(
        request,
        "alerts/outbox.html",
        {
            "messages": list(messages.order_by("-created_at", "-id")[:OUTBOX_SHOWN]),
            "total": OutboxMessage.objects.count(),
            "shown": OUTBOX_SHOWN,
        },
    )


def outbox_message(request: HttpRequest, message_id: int) -> HttpResponse:
    if not user_is_operator(request.user):
        return _forbidden_outbox()
    message = get_object_or_404(OutboxMessage, pk=message_id)
    return render(request, "alerts/outbox_message.html", {"message": message})


def outbox_csv(request: HttpRequest) -> HttpResponse:
    if not user_is_operator(request.user):
        return _forbidden_outbox()
    qs = OutboxMessage.objects.order_by("-created_at", "-id")[:CSV_MAX_ROWS]
    return tables.OUTBOX.csv_response("outbox.csv", qs.iterator(chunk_size=500))
