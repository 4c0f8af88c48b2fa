"""The wire schema's limits and signatures, as a worker meets them (no Django)."""

from __future__ import annotations

import copy
import json
import time

import pytest

from collectors import schema
from collectors.schema import BatchError, Bearer, Signature, batch_sign, node_key
from tests.helpers import make_batch

TOKEN = "a-node-token-of-enough-length-0123"
NOW = time.time()


def _samples() -> dict:
    batch = make_batch("c1", "n1", TOKEN, gpus=1)
    batch["gpus"][0].update(pci_bus_id="00000000:18:00.0", serial="1650924060000")
    return batch


def _job_events() -> dict:
    return {
        "batch_id": "3f2c3f0e-6a57-4a43-9d6c-2f9f3a0b8a11",
        "cluster": "c1",
        "node": "n1",
        "token": TOKEN,
        "sent_at": NOW,
        "events": [
            {
                "job_id": "42",
                "kind": "submitted",
                "ts": NOW - 60,
                "name": "llama",
                "user": "alice",
                "team": "pretrain",
                "partition": "gpu",
                "qos": "normal",
                "comment": "run 7",
            }
        ],
    }


def _node_events() -> dict:
    return {
        "batch_id": "3f2c3f0e-6a57-4a43-9d6c-2f9f3a0b8a12",
        "cluster": "c1",
        "node": "n1",
        "token": TOKEN,
        "sent_at": NOW,
        "gpu_events": [
            {
                "ts": NOW - 60,
                "kind": "xid",
                "source": "kmsg",
                "xid": 79,
                "gpu_uuid": "GPU-1",
                "pci_bus_id": "00000000:18:00.0",
                "message": "fallen off the bus",
            }
        ],
        "log_windows": [
            {
                "job_id": "42",
                "ts": NOW - 60,
                "path": "/var/log/jobs/42.log",
                "first_line_no": 1,
                "lines": ["NCCL error"],
                "trigger": "nccl",
            }
        ],
    }


KINDS = {
    "samples": (_samples, schema.parse_batch),
    "job_events": (_job_events, schema.parse_job_events),
    "node_events": (_node_events, schema.parse_node_events),
}

# Every text field that reaches PostgreSQL, as a path into its batch.
TEXT_FIELDS = [
    ("samples", ("token",)),
    ("samples", ("gpus", 0, "uuid")),
    ("samples", ("gpus", 0, "name")),
    ("samples", ("gpus", 0, "pci_bus_id")),
    ("samples", ("gpus", 0, "serial")),
    ("samples", ("cluster",)),
    ("samples", ("node",)),
    *[("job_events", ("events", 0, f)) for f in ("job_id", "name", "user", "team")],
    *[("job_events", ("events", 0, f)) for f in ("partition", "qos", "comment")],
    *[("node_events", ("gpu_events", 0, f)) for f in ("gpu_uuid", "pci_bus_id", "message")],
    *[("node_events", ("log_windows", 0, f)) for f in ("job_id", "path", "trigger")],
    ("node_events", ("log_windows", 0, "lines", 0)),
]


def _set(batch: dict, path: tuple, value: str) -> dict:
    batch = copy.deepcopy(batch)
    target = batch
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return batch


@pytest.mark.parametrize(("kind", "path"), TEXT_FIELDS, ids=lambda v: str(v))
def test_a_nul_byte_in_any_text_field_refuses_the_batch_naming_the_field(kind, path):
    build, parse = KINDS[kind]
    good = build()
    parse(json.dumps(good))  # the batch is valid without the NUL
    bad = _set(good, path, "bad\x00value-of-enough-length")

    with pytest.raises(BatchError) as exc:
        parse(json.dumps(bad))

    assert exc.value.reason == "malformed"
    assert exc.value.detail.startswith(".".join(str(p) for p in path) + ": ")


# Text a worker writes into line-oriented streams (kernel lines, log windows, names and reasons
# on pages, in emails and in the diagnosis): every text field but the token.
LINE_FIELDS = [(k, p) for k, p in TEXT_FIELDS if p[-1] not in ("token", "cluster", "node")] + [
    ("job_events", ("events", 0, "project")),
]


@pytest.mark.parametrize("char", ["\n", "\r", "\x1b", "\x0b", "\x7f"], ids=repr)
@pytest.mark.parametrize(("kind", "path"), LINE_FIELDS, ids=lambda v: str(v))
def test_a_control_character_in_a_text_field_refuses_the_batch_naming_the_field(kind, path, char):
    build, parse = KINDS[kind]
    bad = _set(build(), path, f"first part{char}second part")

    with pytest.raises(BatchError) as exc:
        parse(json.dumps(bad))

    assert exc.value.reason == "malformed"
    assert exc.value.detail == (
        f"{'.'.join(str(p) for p in path)}: contains the control character "
        f"U+{ord(char):04X}, which could forge a line of a log or a page"
    )


def test_a_tab_is_kept_in_text_and_log_lines():
    batch = _set(_node_events(), ("log_windows", 0, "lines", 0), "step\t1\tloss 2.3")
    assert schema.parse_node_events(json.dumps(batch)).log_windows[0].lines == ["step\t1\tloss 2.3"]


def test_a_gpu_error_message_cannot_carry_a_kernel_line_for_another_node():
    forged = f"fallen off the bus\n{NOW:.0f} node-b kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."
    with pytest.raises(BatchError) as exc:
        schema.parse_node_events(
            json.dumps(_set(_node_events(), ("gpu_events", 0, "message"), forged))
        )
    assert exc.value.detail.startswith(
        "gpu_events.0.message: contains the control character U+000A"
    )


@pytest.mark.parametrize(
    ("kind", "field", "limit"),
    [
        ("samples", "gpus", schema.MAX_GPUS_PER_NODE),
        ("samples", "samples", schema.MAX_SAMPLES_PER_BATCH),
        ("samples", "node_samples", schema.MAX_INTERVALS_PER_BATCH),
        ("job_events", "events", schema.MAX_EVENTS_PER_BATCH),
        ("node_events", "gpu_events", schema.MAX_NODE_EVENTS_PER_BATCH),
        ("node_events", "log_windows", schema.MAX_NODE_EVENTS_PER_BATCH),
    ],
)
def test_every_list_is_bounded(kind, field, limit):
    build, parse = KINDS[kind]
    good = build()
    bad = dict(good, **{field: [good[field][0]] * (limit + 1)})
    with pytest.raises(BatchError) as exc:
        parse(json.dumps(bad))
    assert exc.value.detail.startswith(f"{field}: List should have at most {limit} items")


def test_log_lines_and_their_length_are_bounded():
    good = _node_events()
    for lines in (["x"] * (schema.MAX_WINDOW_LINES + 1), ["x" * (schema.MAX_LINE_CHARS + 1)]):
        bad = _set(good, ("log_windows", 0, "lines"), lines)
        with pytest.raises(BatchError, match="log_windows.0.lines"):
            schema.parse_node_events(json.dumps(bad))


def test_a_signed_batch_carries_no_token_and_proves_its_sender():
    text = json.dumps(_samples(), separators=(",", ":"))
    signed = batch_sign(text)

    assert TOKEN not in signed
    batch = schema.parse_batch(signed)
    assert batch.token is None
    assert isinstance(batch.credential, Signature)
    assert batch.credential.valid_for(node_key(TOKEN))
    assert not batch.credential.valid_for(node_key(TOKEN + "x"))


def test_the_fast_and_the_general_signing_paths_sign_the_same_bytes():
    batch = _samples()
    compact = json.dumps(batch, separators=(",", ":"))  # the collector's own layout
    spaced = json.dumps(batch)  # anything else: parsed and re-serialised
    assert batch_sign(compact) == batch_sign(spaced)


def test_a_body_altered_after_signing_no_longer_verifies():
    signed = batch_sign(json.dumps(_samples(), separators=(",", ":")))
    altered = signed.replace("50.0", "99.0", 1)
    assert altered != signed

    batch = schema.parse_batch(altered)
    assert not batch.credential.valid_for(node_key(TOKEN))


def test_a_signed_batch_may_not_also_carry_its_token():
    signed = batch_sign(json.dumps(_samples(), separators=(",", ":")))
    head, body = signed.split("\n", 1)
    smuggled = head + "\n" + body.replace('"sent_at"', f'"token":"{TOKEN}","sent_at"', 1)
    with pytest.raises(BatchError, match="token: a signed batch must not carry its token"):
        schema.parse_batch(smuggled)


def test_an_unsigned_batch_with_a_token_is_a_bearer_credential_and_without_one_has_none():
    batch = _job_events()
    assert schema.parse_job_events(json.dumps(batch)).credential == Bearer(TOKEN)
    del batch["token"]
    assert schema.parse_job_events(json.dumps(batch)).credential is None


def test_an_oversized_batch_is_refused_as_too_large():
    with pytest.raises(BatchError) as exc:
        schema.parse_batch(schema.OversizedBatch("batch decompresses past 10 bytes", 11))
    assert exc.value.reason == "too_large"
