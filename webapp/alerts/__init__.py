"""Alerts: rules, alerts and their groups, silences, channels, subscriptions, notifications.

For the pages (views.py, urls.py, templates/alerts/): emails link to two fixed paths, the
alert list `/alerts/` (emails.ALERTS_PATH) and the unsubscribe page
`/alerts/unsubscribe/<token>/` (services.UNSUBSCRIBE_PATH): core's page, which works without a
login, told by views.UNSUBSCRIBE_PAGE whose subscriptions it turns off. Reads for the pages are
in selectors.py (alerts_active, subscriptions_of, notifications_for_channel); writes in
services.py (silence_create / silence_expire, subscription_create / _update / _delete,
channel_enable). The demo's outbox is the OutboxMessage table.

The writes by concern: lifecycle.py (raise, resolve, group schedule), evaluate.py (event and
condition rules, the beat pass), delivery.py (routing, notifications), transports.py (each
channel kind's message and its sending; emails go through core.mail), services.py (what
people ask for: subscriptions, silences, channels).
"""
