"""The recovery policy over plain data (no Django database): failure-taxonomy.md's actions,
the circuit breaker, the restart limit, script errors, and one incident acted on once."""

from __future__ import annotations

from webapp.recovery.policy import Facts, JobFacts, breaker_apply, decide

JOB = JobFacts("4242", user="alice", hosts=("n1", "n2"))


def kinds(decision) -> list[tuple[str, str]]:
    return [(s.kind, s.host or s.job or s.audience) for s in decision.steps]


def test_breaker_rules_over_plain_data():
    assert breaker_apply("restart", "n1", []) == ("restart", "", "")
    assert breaker_apply("restart", "n1", ["n1"])[:2] == ("cordon_restart", "breaker_same_node")
    assert breaker_apply("retry", "n1", ["n2", "n3"])[:2] == ("notify", "breaker_other_nodes")
    # Hardware faults on different nodes are independent: no change.
    assert breaker_apply("cordon_restart", "n1", ["n2"]) == ("cordon_restart", "", "")
    assert breaker_apply("restart", "n1", [], restarts_in_a_row=3)[:2] == (
        "notify",
        "restart_limit",
    )


def test_a_gpu_off_the_bus_drains_the_node_then_requeues_its_jobs():
    facts = Facts(
        cause="gpu_off_bus",
        action="cordon_restart",
        error_host="n1",
        node_evidence=True,
        jobs_on_host=(JobFacts("10", hosts=("n1",)), JobFacts("11", hosts=("n1", "n2"))),
    )
    d = decide(facts)
    assert d.action == "cordon_restart" and d.rule == "default_cordon_restart"
    assert kinds(d) == [("drain", "n1"), ("requeue", "10"), ("requeue", "11")]


def test_script_errors_are_never_restarted_and_the_owner_is_told():
    for cause in ("user_exception", "host_oom"):
        d = decide(Facts(cause=cause, action="restart", category="script", job=JOB))
        assert d.action == "notify" and d.rule == "script_error"
        assert kinds(d) == [("notify", "4242")]
        assert d.steps[0].audience == "owner"


def test_the_restart_limit_turns_a_restart_into_a_notification():
    tired = JobFacts("4242", hosts=("n1",), restarts_in_a_row=3)
    d = decide(Facts(cause="aux_connection", action="retry", job=tired, max_restarts=3))
    assert (d.action, d.rule) == ("notify", "restart_limit")
    assert "3 times in a row" in d.reason
    fresh = JobFacts("4242", hosts=("n1",), restarts_in_a_row=2)
    d = decide(Facts(cause="aux_connection", action="retry", job=fresh, max_restarts=3))
    assert kinds(d) == [("requeue", "4242")]
    # Backoff of retry: 30 s x 2^restarts so far.
    assert d.steps[0].params["delay_s"] == 120


def test_the_breaker_cordons_the_node_on_the_second_same_cause_failure():
    d = decide(
        Facts(cause="cuda_fault", action="restart", blamed_host="n1", job=JOB,
              same_cause_hosts=("n1",), node_evidence=True)
    )  # fmt: skip
    assert (d.action, d.rule) == ("cordon_restart", "breaker_same_node")
    assert kinds(d) == [("drain", "n1"), ("requeue", "4242")]
    assert not d.steps[0].needs_approval


def test_cuda_faults_restart_once_then_notify():
    once = JobFacts("4242", hosts=("n1",), restarts_for_cause=1, restarts_in_a_row=1)
    d = decide(Facts(cause="cuda_fault", action="restart", job=once))
    assert (d.action, d.rule) == ("notify", "restart_once")
    assert kinds(decide(Facts(cause="cuda_fault", action="restart", job=JOB))) == [
        ("requeue", "4242")
    ]


def test_a_hang_with_no_blamed_node_health_checks_the_job_nodes_first():
    d = decide(Facts(cause="nccl_timeout", action="locate_restart", job=JOB))
    assert kinds(d) == [("health_check", ""), ("requeue", "4242")]
    assert d.steps[0].params == {"hosts": ["n1", "n2"]}
    # A cordon that names no node becomes a health check of the job's nodes.
    d = decide(Facts(cause="node_lost", action="cordon_restart", job=JOB))
    assert (d.action, d.rule) == ("locate_restart", "cordon_without_node")


def test_one_incident_drains_and_requeues_once():
    # The GPU error already drained n1 and requeued job 4242; the job's own failure adds nothing.
    d = decide(
        Facts(cause="gpu_off_bus", action="cordon_restart", blamed_host="n1", job=JOB,
              hosts_drained=frozenset({"n1"}), jobs_requeued=frozenset({"4242"}))
    )  # fmt: skip
    assert d.action == "cordon_restart" and d.steps == ()


def test_loss_spikes_roll_back_and_skip_the_steps_after_the_checkpoint():
    job = JobFacts("77", hosts=("n1",), spike_step=1200, checkpoint_step=1000)
    d = decide(Facts(cause="loss_nan", action="rollback_skip", job=job))
    (step,) = d.steps
    assert step.kind == "resubmit"
    assert step.params == {"resume_checkpoint": "1000", "skip_steps": "1001-1200"}


def test_outcomes_do_nothing_and_escalations_page_operators():
    assert decide(Facts(cause="cancelled", action="none", job=JOB)).steps == ()
    d = decide(Facts(cause="filesystem", action="escalate", job=JOB))
    assert (d.action, kinds(d)) == ("escalate", [("notify", "4242")])
    assert d.steps[0].audience == "operators" and d.steps[0].params == {"severity": "page"}


def test_at_the_restart_limit_a_node_that_failed_twice_is_still_drained():
    tired = JobFacts("4242", hosts=("n1",), restarts_in_a_row=3)
    d = decide(
        Facts(cause="cuda_fault", action="restart", blamed_host="n1", job=tired,
              same_cause_hosts=("n1",), max_restarts=3)
    )  # fmt: skip
    assert (d.action, d.rule) == ("notify", "restart_limit")
    assert kinds(d) == [("drain", "n1"), ("notify", "4242")]


def test_a_host_the_jobs_log_blames_outside_its_nodes_is_never_acted_on():
    d = decide(Facts(cause="ib_link", action="cordon_restart", blamed_host="victim-77", job=JOB))
    assert (d.action, d.rule) == ("locate_restart", "blamed_outside_job")
    assert kinds(d) == [("health_check", ""), ("requeue", "4242")]
    assert d.steps[0].params == {"hosts": ["n1", "n2"]}
    assert all(
        s.host != "victim-77" and "victim-77" not in s.params.get("hosts", []) for s in d.steps
    )


def test_a_drain_on_the_jobs_log_alone_waits_for_an_operator():
    facts = Facts(cause="ib_link", action="cordon_restart", blamed_host="n2", job=JOB)
    drain, requeue = decide(facts).steps
    assert (drain.kind, drain.host, drain.needs_approval) == ("drain", "n2", True)
    assert not requeue.needs_approval
    trusted = decide(Facts(cause="ib_link", action="cordon_restart", blamed_host="n2", job=JOB,
                           node_evidence=True))  # fmt: skip
    assert not trusted.steps[0].needs_approval


def test_a_reset_or_reboot_drains_the_node_and_restarts_its_jobs_elsewhere():
    for action, then, last in (
        ("reboot", "reboot needed", [("reboot", "n1")]),
        ("reset_gpu", "GPU reset needed", [("reset_gpu", "n1"), ("health_check", ""),
                                           ("resume", "n1")]),
    ):  # fmt: skip
        d = decide(
            Facts(cause="gpu_off_bus", action=action, error_host="n1", node_evidence=True,
                  jobs_on_host=(JobFacts("10", hosts=("n1",)),), gpu_bus_id="00000000:18:00.0")
        )  # fmt: skip
        assert (d.action, d.rule) == (action, f"default_{action}")
        assert kinds(d) == [("drain", "n1"), ("requeue", "10"), *last]
        assert d.steps[0].reason == f"gpu_off_bus on n1: {then}"
