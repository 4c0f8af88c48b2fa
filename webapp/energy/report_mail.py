"""The monthly report by email: who is due which month (in their timezone), one email per
subscription, cluster and month, sent at most once (a leased delivery row), and the signed
unsubscribe link it carries."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from webapp.alerts.services import channel_disable
from webapp.core import mail, workrows
from webapp.energy.models import (
    EnergyReportDelivery,
    EnergyReportSubscription,
    default_timezone,
)
from webapp.energy.selectors import (
    NoEnergyData,
    month_bounds,
)
from webapp.fleet.models import Cluster

# The report email's unsubscribe link (energy/urls.py "energy:unsubscribe"), signed by core.mail.
UNSUBSCRIBE_PATH = "/energy/unsubscribe/{token}/"
UNSUBSCRIBE_PURPOSE = "energy"


def report_unsubscribe_url(sub: EnergyReportSubscription) -> str:
    return mail.unsubscribe_url(UNSUBSCRIBE_PATH, UNSUBSCRIBE_PURPOSE, sub.pk)


def report_unsubscribe(sub: EnergyReportSubscription) -> None:
    EnergyReportSubscription.objects.filter(pk=sub.pk).update(
        active=False, updated_at=timezone.now()
    )
    sub.active = False


def previous_month(now: datetime) -> str:
    """The month before `now`'s month, in `now`'s own timezone ('YYYY-MM')."""
    return f"{now.replace(day=1) - timedelta(days=1):%Y-%m}"


# Reports cover UTC months, each hour accounted once it has ended (every 5 minutes, beat
# `energy-rollups`): a month's report waits this long after the month's end, so a recipient
# east of UTC, whose 1st begins before the UTC month ends, gets the whole month.
REPORT_SETTLE = timedelta(hours=1)


def subscription_zone(sub: EnergyReportSubscription) -> ZoneInfo:
    """The recipient's timezone; a name that no longer resolves (the tz database changed)
    falls back to the default, so the report still goes out."""
    try:
        return ZoneInfo(sub.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo(default_timezone())


def report_month_due(sub: EnergyReportSubscription, now: datetime) -> str | None:
    """The month whose report is due to this recipient at `now`: the previous month, from the
    report day and hour in the recipient's timezone (or later that month: a beat that was
    down catches up), once that UTC month has ended and settled; None when nothing is due."""
    local = now.astimezone(subscription_zone(sub))
    if (local.day, local.hour) < (
        settings.VIGIL_ENERGY_REPORT_DAY,
        settings.VIGIL_ENERGY_REPORT_HOUR,
    ):
        return None
    month = previous_month(local)
    if now < month_bounds(month)[1] + REPORT_SETTLE:
        return None
    return month


# A report delivery is claimed to send it (pending, or failed at an earlier run); one whose
# worker died mid-send is free again once its lease has run out.
DELIVERY_LEASE = workrows.LeaseSpec(
    EnergyReportDelivery,
    claimable=(EnergyReportDelivery.Status.PENDING, EnergyReportDelivery.Status.FAILED),
    running=EnergyReportDelivery.Status.SENDING,
)
# How long one report email may take (render, SMTP) before another worker may send it.
DELIVERY_LEASE_S = 600.0


def report_send(
    sub: EnergyReportSubscription,
    cluster: Cluster,
    month: str,
    pdf: bytes,
    context: dict,
    worker: str = "worker",
) -> EnergyReportDelivery | None:
    """Send one report email with its PDF, at most once. The delivery row is written (and
    committed) before sending and claimed with a lease while the email goes out: a second
    worker skips it (None), a crash mid-send leaves a 'sending' row that a run after its
    lease sends again."""
    to = sub.channel.target
    delivery, _ = EnergyReportDelivery.objects.get_or_create(
        subscription=sub, cluster=cluster, month=month, defaults={"to": to}
    )
    if not workrows.claim(DELIVERY_LEASE, delivery.pk, worker, DELIVERY_LEASE_S):
        delivery.refresh_from_db()
        if delivery.status == EnergyReportDelivery.Status.SENT:
            return delivery
        return None  # another worker is sending it now
    delivery.refresh_from_db()
    _deliver(delivery, sub, cluster, month, pdf, context)
    return delivery


def _deliver(delivery, sub, cluster, month, pdf, context) -> None:
    to = sub.channel.target
    query = urlencode({"cluster": cluster.name, "month": month})
    unsubscribe = report_unsubscribe_url(sub)
    outcome = mail.send(
        "energy-report",
        to,
        {
            **context,
            "report_url": f"{settings.VIGIL_BASE_URL}{reverse('energy:report')}?{query}",
            "page_url": f"{settings.VIGIL_BASE_URL}{reverse('energy:cluster')}?{query}",
            "unsubscribe_url": unsubscribe,
        },
        headers={"List-Unsubscribe": f"<{unsubscribe}>"},
        attachments=[
            mail.Attachment(f"vigil-energy-{cluster.name}-{month}.pdf", pdf, "application/pdf")
        ],
    )
    if outcome.sent:
        delivery.status, delivery.error = EnergyReportDelivery.Status.SENT, ""
        delivery.sent_at = timezone.now()
    else:  # claimable again at the next run
        delivery.status, delivery.error = EnergyReportDelivery.Status.FAILED, outcome.error[:1024]
    if outcome.recipient_refused:
        # As for alerts, the channel is disabled (an admin sees why) rather than refused
        # again every hour.
        channel_disable(sub.channel_id, outcome.error)
    delivery.to, delivery.pdf_bytes, delivery.lease_until = to, len(pdf), None
    workrows.finish(
        DELIVERY_LEASE,
        delivery.pk,
        delivery.status,
        error=delivery.error,
        sent_at=delivery.sent_at,
        to=to,
        pdf_bytes=len(pdf),
    )


def _active_subscriptions() -> list[EnergyReportSubscription]:
    return list(
        EnergyReportSubscription.objects.filter(
            active=True, channel__kind="email", channel__disabled=False
        )
        .select_related("channel")
        .prefetch_related("clusters")
        .order_by("id")
    )


def energy_reports_send(
    month: str | None = None,
    now: datetime | None = None,
    subscriptions: list[EnergyReportSubscription] | None = None,
    worker: str = "worker",
) -> dict:
    """Email the month's report (default: last month, UTC) to these subscriptions (default:
    every active one on an enabled email channel), one email per cluster, each at most once.
    Clusters without data that month are skipped and counted."""
    from webapp.energy import report  # the report renders templates and figures: load late

    now = now or timezone.now()
    month = month or previous_month(now.astimezone(UTC))
    subs = _active_subscriptions() if subscriptions is None else subscriptions
    done = EnergyReportDelivery.Status.SENT
    counts = {"sent": 0, "failed": 0, "no_data": 0, "already": 0}
    built: dict[int, tuple[bytes, dict] | None] = {}
    for sub in subs:
        for cluster in list(sub.clusters.all()) or list(Cluster.objects.order_by("name")):
            if EnergyReportDelivery.objects.filter(
                subscription=sub, cluster=cluster, month=month, status=done
            ).exists():
                counts["already"] += 1
                continue
            if cluster.id not in built:
                try:
                    context = report.report_context(cluster, month)
                except NoEnergyData:
                    built[cluster.id] = None
                else:
                    built[cluster.id] = (report.report_pdf_from(context), context)
            if built[cluster.id] is None:
                counts["no_data"] += 1
                continue
            pdf, context = built[cluster.id]
            d = report_send(sub, cluster, month, pdf, context, worker)
            if d is None:
                counts["already"] += 1
            else:
                counts["sent" if d.status == done else "failed"] += 1
    return {"month": month, **counts}


def energy_reports_due(now: datetime | None = None, worker: str = "worker") -> dict | None:
    """Send each recipient the report that is due in their timezone (report_month_due);
    None when nothing is due. Per month: what energy_reports_send counted."""
    now = now or timezone.now()
    due: dict[str, list[EnergyReportSubscription]] = defaultdict(list)
    for sub in _active_subscriptions():
        month = report_month_due(sub, now)
        if month is not None:
            due[month].append(sub)
    if not due:
        return None
    return {
        month: energy_reports_send(month, now, subs, worker) for month, subs in sorted(due.items())
    }
