"""The job type classifier: plain functions over plain data, no database."""

from __future__ import annotations

import pytest

from webapp.jobs.typing_rules import DEFAULT_RULES, compile_rules, job_type_classify

RULES = compile_rules(DEFAULT_RULES)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"name": "internlm-pretrain-123b"}, "pretrain"),
        ({"name": "PT-7B-run3"}, "pretrain"),
        ({"name": "llm-train-20b"}, "pretrain"),
        ({"name": "llama-sft-chat"}, "sft"),
        ({"name": "FineTune_code"}, "sft"),
        ({"name": "ft-7b-math"}, "sft"),
        ({"name": "opencompass-humaneval"}, "eval"),
        ({"name": "benchmark-mmlu"}, "eval"),
        # An evaluation of a pretraining checkpoint is an evaluation job.
        ({"name": "eval_pretrain_7b_step5000"}, "eval"),
        ({"name": "vlm-pretrain"}, "mllm"),
        ({"name": "MultiModal-align"}, "mllm"),
        ({"name": "debug-nccl"}, "debug"),
        ({"name": "bash", "partition": "interactive"}, "debug"),
        ({"name": "job", "qos": "debug"}, "debug"),
        ({"name": "my_test"}, "debug"),
        # Short words only match as words: "latest" is not "test", "draft" is not "ft".
        ({"name": "latest-draft"}, "other"),
        ({"name": "data-prep"}, "other"),
        ({}, "other"),
    ],
)
def test_default_rules(fields, expected):
    assert job_type_classify(RULES, **fields) == expected


def test_first_matching_rule_wins_and_fields_are_separate():
    rules = compile_rules(
        [
            ("partition", r"^eval$", "eval"),
            ("name", r"train", "pretrain"),
            ("name", r"train", "sft"),  # never reached: the rule above matches first
        ]
    )
    assert job_type_classify(rules, name="train-x", partition="eval") == "eval"
    assert job_type_classify(rules, name="train-x", partition="gpu") == "pretrain"
    # A rule over the partition does not look at the name.
    assert job_type_classify(rules, name="eval") == "other"


def test_matching_is_case_insensitive():
    rules = compile_rules([("comment", r"type=sft", "sft")])
    assert job_type_classify(rules, comment="owner=x TYPE=SFT") == "sft"


def test_bad_rules_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"pattern '\(unclosed'"):
        compile_rules([("name", "(unclosed", "eval")])
    with pytest.raises(ValueError, match="rule field 'user'"):
        compile_rules([("user", "x", "eval")])
