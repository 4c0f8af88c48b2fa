"""Job type from the job's name, partition, QOS or comment: an ordered list of regex rules.

Pure functions over plain data (no Django): the rules come from `JobTypeRule` rows (admin-
editable) or `DEFAULT_RULES`; the first rule whose pattern matches wins, no match is `other`.
Patterns are case-insensitive and searched anywhere in the field (`re.search`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

FIELDS = ("name", "partition", "qos", "comment")
OTHER = "other"

# (field, pattern, job type), in order. Evaluation comes first because evaluation jobs are
# usually named after the checkpoint they evaluate ("eval-internlm-pretrain-7b-step1000");
# multimodal before SFT/pretraining for the same reason ("mllm-sft-...", "vlm-pretrain").
# `(^|[^a-z])word([^a-z]|$)` keeps short words like "test" or "ft" from matching inside
# longer ones ("latest", "draft").
DEFAULT_RULES: tuple[tuple[str, str, str], ...] = (
    ("name", r"eval|benchmark|opencompass|humaneval|mmlu", "eval"),
    ("partition", r"eval", "eval"),
    ("name", r"mllm|(^|[^a-z])vlm([^a-z]|$)|multi-?modal|llava|vision", "mllm"),
    ("partition", r"mllm|multimodal", "mllm"),
    ("name", r"sft|fine-?tun|(^|[^a-z])ft([^a-z]|$)|instruct", "sft"),
    ("partition", r"sft|finetune", "sft"),
    ("name", r"pre-?train|(^|[^a-z])pt([^a-z]|$)|llm-train", "pretrain"),
    ("partition", r"pretrain|llm-train", "pretrain"),
    ("name", r"(^|[^a-z])(debug|test|interactive)([^a-z]|$)", "debug"),
    ("partition", r"debug|interactive|(^|[^a-z])dev([^a-z]|$)", "debug"),
    ("qos", r"debug|interactive", "debug"),
)


@dataclass(frozen=True)
class CompiledRule:
    field: str
    regex: re.Pattern[str]
    job_type: str


def compile_rules(rules: Iterable[tuple[str, str, str]]) -> list[CompiledRule]:
    """Compile (field, pattern, job type) rules in order; raise ValueError naming a bad one."""
    compiled = []
    for field, pattern, job_type in rules:
        if field not in FIELDS:
            raise ValueError(f"rule field {field!r}: expected one of {', '.join(FIELDS)}")
        compiled.append(CompiledRule(field, pattern_compile(pattern), job_type))
    return compiled


def pattern_compile(pattern: str) -> re.Pattern[str]:
    """Compile one rule pattern (case-insensitive); ValueError with the regex problem."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r}: {exc}") from None


def job_type_classify(
    rules: Iterable[CompiledRule],
    *,
    name: str = "",
    partition: str = "",
    qos: str = "",
    comment: str = "",
) -> str:
    """The type of the first rule that matches its field; `other` if none does."""
    values = {"name": name, "partition": partition, "qos": qos, "comment": comment}
    for rule in rules:
        value = values[rule.field]
        if value and rule.regex.search(value):
            return rule.job_type
    return OTHER
