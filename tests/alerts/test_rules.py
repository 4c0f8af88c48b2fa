"""The alerting decisions as plain functions (no database): severity of a failed job,
Alertmanager's group timers, silences and inhibition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from webapp.alerts import rules

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PARAMS = {
    "critical_job_types": ["pretrain"],
    "critical_min_gpus": 64,
    "info_job_types": ["debug"],
    "skip_causes": ["cancelled"],
}


def test_a_failed_pretraining_job_on_64_gpus_pages_and_a_debug_job_does_not():
    sev = rules.job_failure_severity
    assert sev(PARAMS, "warning", job_type="pretrain", gpus=64, cause="gpu_ecc") == "critical"
    assert sev(PARAMS, "warning", job_type="pretrain", gpus=16, cause="gpu_ecc") == "warning"
    assert sev(PARAMS, "warning", job_type="debug", gpus=512, cause="gpu_ecc") == "info"
    assert sev(PARAMS, "warning", job_type="pretrain", gpus=64, cause="cancelled") is None


def test_a_new_group_waits_group_wait_and_a_notified_one_group_interval():
    first = rules.group_flush_at(
        T0, pending_flush_at=None, last_notified_at=None, group_wait_s=1, group_interval_s=60
    )
    assert first == T0 + timedelta(seconds=1)
    again = rules.group_flush_at(
        T0 + timedelta(seconds=10),
        pending_flush_at=None,
        last_notified_at=T0 + timedelta(seconds=1),
        group_wait_s=1,
        group_interval_s=60,
    )
    assert again == T0 + timedelta(seconds=61)
    # A flush already planned earlier is kept (ten alerts, one email).
    kept = rules.group_flush_at(
        T0 + timedelta(seconds=0.5),
        pending_flush_at=first,
        last_notified_at=None,
        group_wait_s=1,
        group_interval_s=60,
    )
    assert kept == first


def test_repeat_interval():
    assert not rules.repeat_due(None, 3600, T0)
    assert not rules.repeat_due(T0, 3600, T0 + timedelta(minutes=59))
    assert rules.repeat_due(T0, 3600, T0 + timedelta(hours=1))


def test_a_silence_matches_every_field_it_names_while_in_force():
    alert = rules.AlertFacts(cluster_id=1, node_id=7, cause="gpu_ecc", team_id=None, rule_kind="x")
    window = {"starts_at": T0, "ends_at": T0 + timedelta(hours=1)}
    by_node = rules.SilenceFacts(cluster_id=1, node_id=7, cause="", team_id=None, **window)
    other_cause = rules.SilenceFacts(
        cluster_id=1, node_id=None, cause="ib_link", team_id=None, **window
    )
    assert rules.silenced(alert, [by_node], T0 + timedelta(minutes=5))
    assert not rules.silenced(alert, [by_node], T0 + timedelta(hours=2))  # over
    assert not rules.silenced(alert, [other_cause], T0 + timedelta(minutes=5))


def test_a_teams_silence_mutes_its_own_recipients_only_and_never_an_operators_alert():
    alert = rules.AlertFacts(1, 7, "gpu_ecc", 5, "recovery_approval")
    window = {"starts_at": T0, "ends_at": T0 + timedelta(hours=1)}
    team5 = rules.SilenceFacts(cluster_id=None, node_id=None, cause="gpu_ecc", team_id=5, **window)
    at = T0 + timedelta(minutes=5)
    assert not rules.silenced(alert, [team5], at)  # not for everyone
    assert rules.silencing_teams(alert, [team5], at) == {5}
    assert rules.silencing_teams(alert, [team5], T0 + timedelta(hours=2)) == frozenset()
    mutes = rules.team_silence_mutes
    assert mutes({5}, {5, 9}, operator_alert=False, recipient_is_operator=False)
    assert not mutes({5}, {9}, operator_alert=False, recipient_is_operator=False)
    # An operator in team 5 still gets the approval, recovery and hardware alerts.
    assert not mutes({5}, {5}, operator_alert=True, recipient_is_operator=True)
    assert mutes({5}, {5}, operator_alert=False, recipient_is_operator=True)


def test_node_down_inhibits_its_gpu_and_job_alerts_only():
    gpu = rules.AlertFacts(1, 7, "gpu_ecc", None, "gpu_hardware")
    elsewhere = rules.AlertFacts(1, 8, "gpu_ecc", None, "gpu_hardware")
    node_down = rules.AlertFacts(1, 7, "", None, "node_down")
    assert rules.inhibited(gpu, frozenset({7}))
    assert not rules.inhibited(elsewhere, frozenset({7}))
    assert not rules.inhibited(node_down, frozenset({7}))


def test_fingerprint_depends_on_rule_and_identity_not_on_order():
    a = rules.fingerprint("node-down", {"node": 7, "cluster": "c"})
    assert a == rules.fingerprint("node-down", {"cluster": "c", "node": 7})
    assert a != rules.fingerprint("gpu-thermal", {"node": 7, "cluster": "c"})
