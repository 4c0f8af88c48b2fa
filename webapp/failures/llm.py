"""Optional LLM hook (off by default): an OpenAI-compatible chat completions endpoint picks a
label from the closed set for a failure no rule explains (docs/failure-signatures.md section 10).

Enabled by settings.VIGIL_LLM_URL (the full `.../v1/chat/completions` URL), with
VIGIL_LLM_MODEL and VIGIL_LLM_API_KEY (services.py builds the LlmConfig from them). Only
evidence lines are sent, capped in size. The answer is validated: a cause outside
taxonomy.py's label set becomes `unknown`; a suggested regex is only stored for a human to
review (ProposedRule), never used directly. Plain Python (http.client), no Django.

The endpoint is outside Vigil's trust: the whole exchange has one deadline (a server that
drips a byte a second cannot hold a worker past it), the reply read is capped in size, and
the evidence (log lines of private jobs) and the API key never travel as plain `http://`
except to this machine.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from webapp.failures import taxonomy

PROMPT_VERSION = "v1"
MAX_LINES = 40  # evidence lines sent
MAX_LINE_CHARS = 300
MAX_PROMPT_CHARS = 8000  # the whole evidence block
# The whole exchange (connect, send, every read): a diagnosis task waits no longer.
TIMEOUT_S = 30.0
# A reply naming one label is under 1 KB; 256 KiB leaves room for a verbose model and stops
# one that never ends.
MAX_REPLY_BYTES = 256 * 1024
# Plain http:// only to this machine (a model served next to the worker).
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class LlmError(Exception):
    """The endpoint failed or answered something that is not the expected JSON."""


@dataclass(frozen=True)
class LlmConfig:
    url: str
    model: str
    api_key: str
    timeout_s: float = TIMEOUT_S  # total deadline of one request, not per read
    max_reply_bytes: int = MAX_REPLY_BYTES


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


def url_refusal(url: str) -> str | None:
    """Why this endpoint URL is refused, or None: https anywhere, http only to localhost."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and (parts.hostname or "").lower() in LOCAL_HOSTS:
        return None
    if parts.scheme == "http":
        return f"{url}: plain http:// only to localhost, 127.0.0.1 or ::1; use https://"
    return f"{url}: not an http(s) URL"


def _read_capped(
    response: http.client.HTTPResponse, sock, deadline: float, limit: int, url: str
) -> bytes:
    chunks, size = [], 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        chunk = response.read1(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise LlmError(f"{url}: reply larger than {limit} bytes")


def _post(config: LlmConfig, body: dict) -> dict:
    refusal = url_refusal(config.url)
    if refusal:
        raise LlmError(refusal)
    deadline = time.monotonic() + config.timeout_s
    parts = urlsplit(config.url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=config.timeout_s)
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        # Kept: the connection lets go of its socket when the reply is the last on it.
        sock = conn.sock
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        response = conn.getresponse()
        data = _read_capped(response, sock, deadline, config.max_reply_bytes, config.url)
        if response.status != 200:
            raise LlmError(f"{config.url}: HTTP {response.status}: {data[:200]!r}")
        return json.loads(data.decode("utf-8", "replace"))
    except TimeoutError as exc:  # the socket's timeout is what is left of the deadline
        raise LlmError(
            f"{config.url}: no complete reply within the deadline ({config.timeout_s} s)"
        ) from exc
    except (http.client.HTTPException, OSError) as exc:
        raise LlmError(f"{config.url}: {exc}") from exc
    except ValueError as exc:
        raise LlmError(f"{config.url}: not JSON: {exc}") from exc
    finally:
        conn.close()


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
