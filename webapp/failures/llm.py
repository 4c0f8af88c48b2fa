"""Optional LLM hook (off by default): an OpenAI-compatible chat completions endpoint picks a
label from the closed set for a failure no rule explains (failure-signatures.md section 10).

Enabled by settings.VIGIL_LLM_URL (the full `.../v1/chat/completions` URL), with
VIGIL_LLM_MODEL and VIGIL_LLM_API_KEY (services.py builds the LlmConfig from them). Only
evidence lines are sent, capped in size. The answer is validated: a cause outside
taxonomy.py's label set becomes `unknown`; a suggested regex is only stored for a human to
review (ProposedRule), never used directly. Plain Python (urllib), no Django.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from webapp.failures import taxonomy

PROMPT_VERSION = "v1"
MAX_LINES = 40  # evidence lines sent
MAX_LINE_CHARS = 300
MAX_PROMPT_CHARS = 8000  # the whole evidence block
TIMEOUT_S = 30.0


class LlmError(Exception):
    """The endpoint failed or answered something that is not the expected JSON."""


@dataclass(frozen=True)
class LlmConfig:
    url: str
    model: str
    api_key: str
    timeout_s: float = TIMEOUT_S


@dataclass(frozen=True)
class LlmAnswer:
    cause: str
    category: str
    confidence: float
    evidence_line_ids: list[int]
    suggested_regex: str
    model: str
    prompt_version: str = PROMPT_VERSION
    rejected: str = ""  # why the model's label was not accepted, if it was not

    def as_dict(self) -> dict:
        return asdict(self)


def evidence_block(lines: list[str]) -> str:
    """Numbered evidence lines, each and all capped (the prompt stays small)."""
    out, size = [], 0
    for i, line in enumerate(lines[:MAX_LINES]):
        text = f"{i}: {line.strip()[:MAX_LINE_CHARS]}"
        if size + len(text) > MAX_PROMPT_CHARS:
            break
        out.append(text)
        size += len(text) + 1
    return "\n".join(out)


def messages(lines: list[str]) -> list[dict]:
    causes = ", ".join(taxonomy.CAUSES)
    categories = ", ".join(c.value for c in taxonomy.Category if c != taxonomy.Category.OUTCOME)
    system = (
        "You classify why a GPU training job failed, from its log lines. Answer with one JSON "
        'object and nothing else: {"cause": one of ['
        + causes
        + '], "category": one of ['
        + categories
        + '], "evidence_line_ids": [line numbers], "confidence": 0..1, '
        '"suggested_regex": a Python regular expression matching the deciding line, or ""}. '
        'If no label fits, answer cause "unknown".'
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "Log lines:\n" + evidence_block(lines)},
    ]


def _post(config: LlmConfig, body: dict) -> dict:
    data = json.dumps(body).encode()
    request = urllib.request.Request(config.url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    if config.api_key:
        request.add_header("Authorization", f"Bearer {config.api_key}")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout_s) as response:  # noqa: S310
            return json.loads(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise LlmError(f"{config.url}: {exc}") from exc
    except ValueError as exc:
        raise LlmError(f"{config.url}: not JSON: {exc}") from exc


_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


def parse_answer(content: str, model: str) -> LlmAnswer:
    """Validate the model's text against the closed label set (anything else is unknown)."""
    m = _JSON_OBJECT.search(content or "")
    try:
        raw = json.loads(m.group(0)) if m else None
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        return LlmAnswer("unknown", "unknown", 0.0, [], "", model, rejected="not a JSON object")
    cause = raw.get("cause")
    rejected = ""
    if cause not in taxonomy.CAUSES:
        rejected = f"cause {str(cause)[:64]!r} is not in the label set"
        cause = "unknown"
    category = taxonomy.CAUSES[cause].category.value  # the cause decides, never the model
    try:
        confidence = min(max(float(raw.get("confidence", 0.5)), 0.0), 1.0)
    except (TypeError, ValueError):
        confidence = 0.5
    ids = [i for i in raw.get("evidence_line_ids") or [] if isinstance(i, int)][:MAX_LINES]
    regex = raw.get("suggested_regex") or ""
    if not isinstance(regex, str):
        regex = ""
    if regex:
        try:
            re.compile(regex)
        except re.error:
            regex = ""
    return LlmAnswer(
        cause, category, round(confidence, 2), ids, regex[:512], model, rejected=rejected
    )


def classify(config: LlmConfig, lines: list[str]) -> LlmAnswer:
    """Ask the endpoint; raises LlmError when it cannot answer."""
    body = {
        "model": config.model,
        "messages": messages(lines),
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    reply = _post(config, body)
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LlmError(f"unexpected reply shape: {str(reply)[:200]}") from exc
    return parse_answer(content, config.model)
