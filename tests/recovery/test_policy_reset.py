"""The policy's GPU reset, reboot and guard rails over plain data: what follows the drain of a
RESET_GPU or RESTART_BM Xid, a person's drain left alone, and the cluster's caps."""

from __future__ import annotations

from webapp.recovery.policy import Facts, JobFacts, decide, nodes_out_max

BUS = "00000000:18:00.0"


def _facts(action: str = "reset_gpu", **kw) -> Facts:
    base = dict(
        cause="gpu_firmware",
        action=action,
        error_host="n1",
        node_evidence=True,
        jobs_on_host=(JobFacts("10", hosts=("n1",)),),
        gpu_bus_id=BUS,
        nodes_total=40,
    )
    return Facts(**(base | kw))


def test_a_gpu_reset_runs_in_a_reservation_of_the_plan_then_checks_and_resumes():
    reset, check, resume = decide(_facts()).steps[2:]
    assert (reset.kind, reset.host, reset.params["bus_id"]) == ("reset_gpu", "n1", BUS)
    held = reset.params["reservation"]
    assert held == "vigil-reset-{plan}-n1"  # named after the plan when it is written
    assert (check.kind, check.params["hosts"], check.params["reservation"]) == (
        "health_check", ["n1"], held,
    )  # fmt: skip
    assert (resume.kind, resume.host, resume.params["reservation"]) == ("resume", "n1", held)


def test_without_a_health_check_the_reset_node_is_drained_again_for_a_person():
    steps = decide(_facts(health_check=False)).steps
    assert [s.kind for s in steps] == ["drain", "requeue", "reset_gpu", "drain"]
    assert "no health check configured" in steps[-1].params["reason"]
    assert not any(s.kind == "resume" for s in steps)


def test_a_node_a_person_drained_is_neither_reset_nor_resumed():
    for action in ("reset_gpu", "reboot"):
        d = decide(_facts(action, hosts_drained=frozenset({"n1"}), hosts_held=frozenset({"n1"})))
        assert [(s.kind, s.audience) for s in d.steps] == [
            ("requeue", ""), ("notify", "operators"),
        ]  # fmt: skip
        assert "a person drained n1" in d.steps[-1].reason


def test_a_gpu_without_a_known_bus_id_is_left_drained_and_operators_are_told():
    d = decide(_facts(gpu_bus_id=""))
    assert [s.kind for s in d.steps] == ["drain", "requeue", "notify"]
    assert "PCI bus id is unknown" in d.steps[-1].reason


def test_the_same_incident_does_not_reset_twice():
    # The job's failure after the GPU error's plan: the node is being drained already.
    d = decide(_facts(hosts_drained=frozenset({"n1"})))
    assert [s.kind for s in d.steps] == ["requeue"]


def test_a_fourth_drain_in_the_hour_waits_for_approval_and_operators_are_told():
    assert not any(s.needs_approval for s in decide(_facts(drains_last_hour=2)).steps)
    d = decide(_facts(drains_last_hour=3))
    drain = d.steps[0]
    assert (drain.kind, drain.needs_approval) == ("drain", True)
    assert "3 node(s) drained by Vigil in the last hour, at most 3 an hour" in drain.reason
    assert d.rule == "guard_rail"
    tell = d.steps[-1]
    assert (tell.kind, tell.audience, tell.params) == ("notify", "operators", {"severity": "page"})
    assert "waits for approval" in tell.reason


def test_past_the_share_of_nodes_out_a_drain_waits_for_approval():
    assert nodes_out_max(40, 0.10) == 4
    assert nodes_out_max(2, 0.10) == 1  # a small cluster still drains its one bad node
    assert not decide(_facts(nodes_out=3)).steps[0].needs_approval
    d = decide(_facts(nodes_out=4))
    assert d.steps[0].needs_approval
    assert "4 of 40 nodes out of service already, at most 4 (10%)" in d.steps[0].reason


def test_an_executor_that_cannot_reset_leaves_the_node_drained_and_tells_operators():
    d = decide(_facts(unsupported=frozenset({"reset_gpu", "reboot"})))
    assert [s.kind for s in d.steps] == ["drain", "requeue", "notify"]
    assert "which this cluster's executor cannot do" in d.steps[-1].reason


WORDS = "Xid 54 SILENT_RUNNING_PWR_REDUCED_CLOCKING: Auxiliary power is not connected (CHECK_MECHANICALS)"


def test_an_escalated_xid_drains_the_node_and_tells_operators_in_the_catalogs_words():
    d = decide(_facts("escalate", catalog_words=WORDS))
    drain, requeue, tell = d.steps
    assert (drain.kind, drain.host, drain.needs_approval) == ("drain", "n1", False)
    assert drain.params["reason"].startswith("escalated to operators")
    assert (requeue.kind, requeue.job) == ("requeue", "10")
    assert (tell.kind, tell.audience, tell.params) == ("notify", "operators", {"severity": "page"})
    assert WORDS in tell.reason and "never returned to service by Vigil" in tell.reason
    assert not any(s.kind in ("resume", "reset_gpu", "reboot") for s in d.steps)


def test_an_escalation_drain_is_held_by_the_guard_rails_like_any_other():
    d = decide(_facts("escalate", catalog_words=WORDS, drains_last_hour=3))
    assert d.steps[0].kind == "drain" and d.steps[0].needs_approval
    assert d.rule == "guard_rail"


def test_a_node_escalated_earlier_is_not_reset_or_resumed_by_a_later_plan():
    d = decide(_facts(hosts_drained=frozenset({"n1"}), hosts_escalated=frozenset({"n1"})))
    assert [s.kind for s in d.steps] == ["requeue", "notify"]
    assert "escalated to operators" in d.steps[-1].reason


def test_an_escalation_without_the_xids_words_only_notifies():
    # A filesystem escalation (no Xid): operators are told, no node is drained.
    d = decide(_facts("escalate", cause="filesystem"))
    assert [s.kind for s in d.steps] == ["notify"]
