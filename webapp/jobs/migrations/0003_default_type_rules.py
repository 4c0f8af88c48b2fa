"""The default job type rules (webapp/jobs/typing_rules.py DEFAULT_RULES at the time of writing).

Copied here rather than imported, so this migration keeps meaning what it meant when the code
changes. Sites edit the rows in the admin afterwards.
"""

from django.db import migrations

DEFAULT_RULES = (
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


def add_rules(apps, schema_editor):
    JobTypeRule = apps.get_model("jobs", "JobTypeRule")
    if JobTypeRule.objects.exists():
        return
    JobTypeRule.objects.bulk_create(
        JobTypeRule(order=(i + 1) * 10, field=field, pattern=pattern, job_type=job_type)
        for i, (field, pattern, job_type) in enumerate(DEFAULT_RULES)
    )


def remove_rules(apps, schema_editor):
    JobTypeRule = apps.get_model("jobs", "JobTypeRule")
    JobTypeRule.objects.filter(pattern__in=[p for _, p, _ in DEFAULT_RULES]).delete()


class Migration(migrations.Migration):
    dependencies = [("jobs", "0002_job_state_at_job_type_explicit")]

    operations = [migrations.RunPython(add_rules, remove_rules)]
