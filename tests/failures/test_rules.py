"""The rule catalogue: valid, its examples match their own rule, grep reads its patterns."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import re2

from webapp.failures import taxonomy
from webapp.failures.diagnosis import (
    EVIDENCE_TEXT_CHARS,
    RULES_PATH,
    RuleError,
    catalogue_load,
    catalogue_parse,
    classify,
    diagnose_text,
)


def test_every_rule_example_passes_the_prefilter_and_matches_its_rule():
    cat = catalogue_load()
    for rule in cat.rules:
        assert rule.examples or rule.kind == "ignore", rule.id
        if not rule.per_line:
            continue
        for example in rule.examples:
            low = example.lower().encode()
            if rule.kind != "ignore":
                assert any(a in low for a in cat.anchors), (rule.id, example)
            _, line = classify(example, cat)
            first = next(
                r.id
                for r in cat.line_rules
                if (r.regex.match if r.at_start else r.regex.search)(line.message)
            )
            assert first == rule.id, (rule.id, example)


def test_rule_causes_are_in_the_taxonomy():
    for rule in catalogue_load().rules:
        assert rule.cause in taxonomy.CAUSES or rule.cause in (
            "by_xid",
            "by_exception",
            "by_exit",
            "by_state",
        )
        assert rule.tier in taxonomy.TIER_RANK or rule.tier == "by_xid"


def test_every_xid_cause_is_a_cause():
    for xid in taxonomy.XIDS.values():
        assert xid.cause is None or xid.cause in taxonomy.CAUSES
        assert xid.tier in taxonomy.TIER_RANK or xid.tier == "ignore"


def test_page_worthy_xids_are_hardware_causes():
    # telemetry.md section 5 "page" column, and every Xid NVIDIA's catalog acts on the node for.
    paged = {code for code, xid in taxonomy.XIDS.items() if xid.page}
    assert {48, 62, 64, 74, 79, 95, 119, 120, 140, 143} <= paged
    # Ignorable Xids whose recurrence asks for support page without a cause (92, 157).
    told = {code for code in paged if taxonomy.XIDS[code].cause is None}
    assert {92, 157} <= told and 63 not in paged
    assert all(taxonomy.XIDS[code].tier == "hardware" for code in paged - told)
    assert not taxonomy.xid_info(999).page


def test_malformed_rules_are_rejected_with_the_rule_named():
    bad = "anchors: [x]\nrules:\n- {id: r1, cause: nope, kind: cause, tier: hardware, patterns: [a], blame: line, confidence: 1}\n"
    with pytest.raises(RuleError, match="r1"):
        catalogue_parse(bad)


def test_anchor_outside_ascii_is_rejected():
    text = RULES_PATH.read_text(encoding="utf-8").replace("  - rror ", "  - rrör ", 1)
    with pytest.raises(RuleError, match="rrör"):
        catalogue_parse(text)


def test_anchor_that_yaml_reads_as_a_mapping_is_rejected():
    # Unquoted, "start running, host:" is a YAML mapping; it must not become the text of one.
    text = RULES_PATH.read_text(encoding="utf-8").replace(
        '  - "start running, host:"', "  - start running, host: ", 1
    )
    with pytest.raises(RuleError, match="start running, host"):
        catalogue_parse(text)


@pytest.mark.skipif(shutil.which("grep") is None, reason="no grep")
def test_grep_reads_every_pattern(tmp_path):
    from webapp.failures.diagnosis import grep_patterns

    pats = tmp_path / "patterns"
    pats.write_text("\n".join(grep_patterns()) + "\n")
    log = tmp_path / "x.log"
    log.write_text("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    out = subprocess.run(
        ["grep", "-E", "-i", "-c", "-f", str(pats), str(log)],
        capture_output=True,
        text=True,
        env={"LC_ALL": "C"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


# What a log line can carry that nobody outside the job's team may see.
SECRETS = ("/home/alice/.keys/prod-db.pem", "hf_Zq8vT3kLm9XwP2", "AKIAZ7Q3SECRET")


def _with_secrets(example: str) -> list[str]:
    """The example with the secrets put where a real line carries them: at its end, and in
    place of its first path or quoted word (a rule's pattern may need the end as written)."""
    planted = " ".join(SECRETS)
    variants = [f"{example} {planted}", f"{example.rstrip('.')} at {planted}"]
    for old in (r'"[^"]*"', r"'[^']*'", r"/[\w./-]+"):
        if re.search(old, example):
            variants.append(re.sub(old, lambda _: f'"{planted}"', example, count=1))
    return variants


def test_no_rules_detail_repeats_the_text_of_its_line():
    """The detail is shown to every user (failure list, CSV, emails, webhooks): a rule-defined
    label, never the matched line's paths or tokens (those stay in the evidence)."""
    cat = catalogue_load()
    covered = set()
    for rule in cat.line_rules:
        if rule.kind == "ignore":
            continue
        for example in rule.examples:
            for text in _with_secrets(example):
                got = diagnose_text(text)
                if got.rule_id != rule.id:
                    continue  # the planted text made another rule (or none) the answer
                covered.add(rule.id)
                assert got.detail, (rule.id, text)
                for secret in SECRETS:
                    assert secret not in got.detail, (rule.id, got.detail)
                # The evidence keeps the line as printed.
                assert got.evidence[0].text.startswith(text.strip()[: EVIDENCE_TEXT_CHARS - 8])
    # Every rule of the catalogue that makes events was tried with secrets in its line.
    assert covered == {r.id for r in cat.line_rules if r.kind != "ignore"}


def test_every_rule_runs_on_a_linear_time_engine():
    """A job chooses its lines: a rule's ".*" under re's backtracking search costs time
    quadratic in a line's length (a 4 KB line of "mlx5_core " repeated: tens of ms per rule),
    RE2's is linear. Every compiled pattern of the catalogue is RE2's."""
    cat = catalogue_load()
    for rule in cat.rules:
        engines = {type(rule.regex), *(type(rx) for _, rx in rule.checks)}
        assert engines == {re2._Regexp}, (rule.id, engines)
    crafted = "mlx5_core " * 400 + "error"
    assert next((r.id for r in cat.line_rules if r.regex.search(crafted)), None) is None
