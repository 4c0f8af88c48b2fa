"""The optional LLM hook against a small local OpenAI-compatible server (http.server on
127.0.0.1, in a thread): valid label taken, invalid label -> unknown, proposed rule stored."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from webapp.failures import llm
from webapp.failures.models import FailureEvent, ProposedRule
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose


class FakeModel:
    """What the local endpoint answers next, and what it was asked."""

    def __init__(self) -> None:
        self.content = "{}"
        self.requests: list[dict] = []
        self.headers: list[dict] = []


@pytest.fixture
def endpoint(settings) -> Iterator[FakeModel]:
    model = FakeModel()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            model.requests.append(json.loads(body))
            model.headers.append(dict(self.headers))
            reply = {
                "id": "cmpl-1",
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": model.content}}
                ],
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.VIGIL_LLM_URL = f"http://127.0.0.1:{server.server_port}/v1/chat/completions"
    settings.VIGIL_LLM_MODEL = "tiny-test-model"
    settings.VIGIL_LLM_API_KEY = "sk-test"
    yield model
    server.shutdown()
    server.server_close()
    thread.join(5)


def _unexplained_failure(fleet) -> FailureEvent:
    end = float(int(time.time())) - 300
    fleet.run_job("900", end - 3600, None, nodes=("gpu-node-01",))
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            log_windows=[
                {
                    "job_id": "900",
                    "ts": end - 5,
                    "path": "/logs/900.err",
                    "first_line_no": 1,
                    "lines": ["step 10", "fatal: the flux capacitor overheated", "exiting"],
                }
            ],
        )
    )
    fleet.run_job("900", end - 3600, end, nodes=("gpu-node-01",))
    return FailureEvent.objects.get()


@pytest.mark.django_db
def test_hook_is_off_without_a_url(fleet, settings):
    settings.VIGIL_LLM_URL = ""
    failure = failure_diagnose(_unexplained_failure(fleet).pk)
    assert (failure.cause, failure.source, failure.llm) == ("unknown", "rules", {})


@pytest.mark.django_db
def test_valid_label_is_taken_as_a_suggestion_and_its_rule_waits_for_review(fleet, endpoint):
    endpoint.content = json.dumps(
        {
            "cause": "filesystem",
            "category": "script",  # wrong on purpose: the cause decides the category
            "evidence_line_ids": [1],
            "confidence": 0.7,
            "suggested_regex": r"flux capacitor overheated",
        }
    )
    failure = failure_diagnose(_unexplained_failure(fleet).pk)
    failure.refresh_from_db()
    assert failure.cause == "filesystem"
    assert failure.category == "infrastructure"
    assert failure.source == "llm"
    assert failure.action == "notify"  # a suggestion never cordons or restarts
    assert failure.llm["model"] == "tiny-test-model"
    rule = ProposedRule.objects.get()
    assert (rule.cause, rule.pattern, rule.status) == (
        "filesystem",
        "flux capacitor overheated",
        "proposed",
    )
    # Only evidence went out, with the closed label set; the key as a bearer token.
    sent = endpoint.requests[0]
    assert sent["model"] == "tiny-test-model"
    assert "gpu_off_bus" in sent["messages"][0]["content"]
    assert "flux capacitor" in sent["messages"][1]["content"]
    assert endpoint.headers[0]["Authorization"] == "Bearer sk-test"


@pytest.mark.django_db
def test_label_outside_the_set_becomes_unknown(fleet, endpoint):
    endpoint.content = json.dumps(
        {"cause": "cosmic_rays", "confidence": 0.99, "suggested_regex": "flux"}
    )
    failure = failure_diagnose(_unexplained_failure(fleet).pk)
    failure.refresh_from_db()
    assert failure.cause == "unknown"
    assert failure.source == "rules"
    assert "not in the label set" in failure.llm["rejected"]
    assert not ProposedRule.objects.exists()


@pytest.mark.django_db
def test_rules_explained_failures_never_reach_the_model(fleet, endpoint):
    end = float(int(time.time())) - 300
    fleet.run_job("901", end - 3600, end, state="NODE_FAIL", nodes=("gpu-node-01",))
    failure = failure_diagnose(FailureEvent.objects.get().pk)
    assert failure.cause == "node_lost"
    assert endpoint.requests == []


def test_unreachable_endpoint_is_an_llm_error():
    config = llm.LlmConfig(
        url="http://127.0.0.1:9/v1/chat/completions", model="m", api_key="", timeout_s=2
    )
    with pytest.raises(llm.LlmError):
        llm.classify(config, ["x"])


def test_prompt_is_size_capped():
    lines = ["y" * 5000] * 500
    block = llm.evidence_block(lines)
    assert len(block) <= llm.MAX_PROMPT_CHARS
    assert block.count("\n") < llm.MAX_LINES


def test_garbage_answer_is_unknown():
    answer = llm.parse_answer("I think it is the network", "m")
    assert answer.cause == "unknown"
    assert answer.rejected == "not a JSON object"


class Misbehaving(BaseHTTPRequestHandler):
    """An endpoint that answers too slowly (a byte at a time) or too much."""

    mode = "drip"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            if self.mode == "drip":
                # Every read gets a byte well inside any per-read timeout; the reply never ends.
                for _ in range(200):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            else:
                for _ in range(64):
                    self.wfile.write(b" " * 65536)  # 4 MiB of nothing useful
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def misbehaving() -> Iterator[tuple[str, type[Misbehaving]]]:
    handler = type("Handler", (Misbehaving,), {})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1/chat/completions", handler
    server.shutdown()
    server.server_close()


def test_a_drip_fed_reply_is_cut_at_the_total_deadline(misbehaving):
    url, handler = misbehaving
    handler.mode = "drip"
    config = llm.LlmConfig(url=url, model="m", api_key="", timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(llm.LlmError, match="deadline"):
        llm.classify(config, ["x"])
    assert time.monotonic() - started < 2.0  # the server would have dripped for 10 s


def test_a_huge_reply_is_cut_at_the_cap(misbehaving):
    url, handler = misbehaving
    handler.mode = "huge"
    config = llm.LlmConfig(url=url, model="m", api_key="", timeout_s=10, max_reply_bytes=100_000)
    with pytest.raises(llm.LlmError, match="larger than 100000 bytes"):
        llm.classify(config, ["x"])


@pytest.mark.parametrize(
    "url",
    [
        "http://llm.example.org/v1/chat/completions",
        "http://10.0.0.5:8080/v1/chat/completions",
        "ftp://127.0.0.1/v1",
    ],
)
def test_plain_http_leaves_this_machine_never(url):
    config = llm.LlmConfig(url=url, model="m", api_key="sk-secret", timeout_s=1)
    with pytest.raises(llm.LlmError, match="http"):
        llm.classify(config, ["x"])


@pytest.mark.parametrize(
    "url",
    [
        "https://llm.example.org/v1/chat/completions",
        "http://localhost:8080/v1",
        "http://127.0.0.1:8080/v1",
        "http://[::1]:8080/v1",
    ],
)
def test_https_and_local_http_are_allowed(url):
    assert llm.url_refusal(url) is None
