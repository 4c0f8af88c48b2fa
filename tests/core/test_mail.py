"""One mail backbone: every email Vigil sends goes through core.mail.send, which renders the
kind's three templates, sends under a deadline and sorts the server's answer (a real SMTP
server, aiosmtpd); one signed unsubscribe scheme, whose links from emails already sent keep
working."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.test import Client

from tests.alerts.conftest import REFUSED, _free_port, smtp, text_of  # noqa: F401 (fixture)
from webapp.alerts.models import Channel, Subscription
from webapp.core import mail
from webapp.energy.models import EnergyReportSubscription

ROOT = Path(__file__).resolve().parent.parent.parent

# What builds or sends an email in Django: only core/mail.py may call these.
MAIL_CALLS = {
    "send_mail",
    "send_mass_mail",
    "mail_admins",
    "mail_managers",
    "get_connection",
    "EmailMessage",
    "EmailMultiAlternatives",
}


def mail_senders(root: Path) -> list[str]:
    """`path:line name` of every call of MAIL_CALLS under `root` outside core/mail.py."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts or path.relative_to(root).as_posix() == "core/mail.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if name in MAIL_CALLS:
                found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def test_one_function_sends_every_email():
    assert mail_senders(ROOT / "webapp") == []


EXPORT_CTX = {
    "export": {"month": "2026-10", "rows": 42},
    "cluster": {"name": "watt"},
    "url": "http://vigil.example.org/api/v1/energy/exports/7/",
}


def test_send_renders_the_kinds_three_templates_and_sorts_the_answers(smtp, settings):  # noqa: F811
    outcome = mail.send(
        "energy-export",
        "ops@example.org",
        EXPORT_CTX,
        headers={"List-Unsubscribe": "<http://vigil.example.org/u/>"},
        attachments=[mail.Attachment("r.pdf", b"%PDF-1.4\n", "application/pdf")],
    )
    assert outcome == mail.SendOutcome(mail.SENT)
    [msg] = smtp.to("ops@example.org")
    assert msg["Subject"] == "Energy CSV watt 2026-10: 42 rows ready"
    assert EXPORT_CTX["url"] in text_of(msg)
    assert EXPORT_CTX["url"] in msg.get_body(preferencelist=("html",)).get_content()
    assert msg["List-Unsubscribe"] == "<http://vigil.example.org/u/>"
    assert msg["Message-ID"]  # made when the caller gives none
    [pdf] = [p for p in msg.iter_attachments() if p.get_filename() == "r.pdf"]
    assert pdf.get_content() == b"%PDF-1.4\n"

    # A refused address: refused, and said to be the recipient's fault (disables a channel).
    refused = mail.send("energy-export", REFUSED, EXPORT_CTX)
    assert refused.status == mail.REFUSED and refused.recipient_refused
    assert "550" in refused.error and REFUSED in refused.error

    # Nobody listening: worth trying again later, nothing disabled.
    settings.EMAIL_PORT = _free_port()
    away = mail.send("energy-export", "ops@example.org", EXPORT_CTX, deadline_s=5)
    assert away.status == mail.RETRY and not away.recipient_refused
    assert "could not reach the mail server" in away.error
    assert len(smtp.all()) == 1


@pytest.mark.django_db
def test_unsubscribe_links_from_emails_already_sent_still_work():
    """Links signed before core.mail existed (each app's own salt, the same payload) are
    taken by the one page; a token signed for one purpose is refused by the other's path."""
    user = get_user_model().objects.create_user("alice", "alice@example.org")
    channel = Channel.objects.create(kind="email", config={"address": "alice@example.org"})
    alerts_sub = Subscription.objects.create(user=user, channel=channel, scope="own_jobs")
    energy_sub = EnergyReportSubscription.objects.create(channel=channel)
    # As the alerts and energy apps signed their links before.
    old_alerts = signing.dumps({"s": alerts_sub.pk}, salt="vigil.alerts.unsubscribe", compress=True)
    old_energy = signing.dumps({"s": energy_sub.pk}, salt="vigil.energy.unsubscribe", compress=True)
    anonymous = Client()
    page = anonymous.get(f"/alerts/unsubscribe/{old_alerts}/")
    assert page.status_code == 200
    assert "Unsubscribe from Vigil alerts" in page.content.decode()
    assert "alice@example.org" in page.content.decode()
    page = anonymous.get(f"/energy/unsubscribe/{old_energy}/")
    assert page.status_code == 200
    assert "the monthly energy report" in page.content.decode()
    # Each token only where it was signed for.
    wrong = anonymous.get(f"/energy/unsubscribe/{old_alerts}/")
    assert wrong.status_code == 400 and "not valid" in wrong.content.decode()

    assert anonymous.post(f"/alerts/unsubscribe/{old_alerts}/").status_code == 200
    assert anonymous.post(f"/energy/unsubscribe/{old_energy}/").status_code == 200
    alerts_sub.refresh_from_db()
    energy_sub.refresh_from_db()
    assert not alerts_sub.active and not energy_sub.active


def test_a_subject_carries_names_as_written_not_html_entities():
    # A subject is a plain-text header: a job or team name with a quote, an ampersand or an
    # angle bracket reads as typed (it read "llm&amp;co" and "&#x27;"); the HTML part escapes.
    class Alert:
        severity = "critical"
        summary = "job 'llm&co' <run 2> failed on gpu-a-01"

    rendered = mail.render("alert-firing", {"a": Alert(), "alerts": [], "group": ""})
    assert rendered.subject == "[Vigil critical] job 'llm&co' <run 2> failed on gpu-a-01"
    for name, ctx in (
        ("alert-approval", {"a": Alert()}),
        ("alert-resolved", {"resolved": [Alert()], "group": "g"}),
        ("alert-grouped", {"firing": [Alert()], "resolved": [], "group": "team 'a&b'"}),
    ):
        subject = mail.render(name, ctx).subject
        assert "&amp;" not in subject and "&#x27;" not in subject, (name, subject)
