"""Wire schema v1: what a collector sends and what the ingest worker accepts.

This module is the one definition of the format; the workers import it from here.

A batch is one node's samples for one or more intervals. Each GPU sample is one wide row per
GPU per timestamp, sent positionally (a JSON array in the order of `GPU_FIELDS`) because
that is 4-5x cheaper to parse and validate than one object per sample, and ingest rate is
bounded by exactly that. Values a GPU does not support are `null`, never a sentinel number.

    {"v": 1, "batch_id": "…uuid…", "cluster": "seren", "node": "gpu-a-001",
     "sent_at": 1700000000.5,
     "gpus": [{"index": 0, "uuid": "GPU-…", "name": "NVIDIA H100 80GB HBM3",
               "memory_total_bytes": 85520809984}],
     "samples": [[0, 1700000000.0, 97.0, 41.0, 0.82, …], …],
     "node_samples": [[1700000000.0, 35.2, 41.0, …], …]}

On the broker a batch travels signed (`batch_sign`: an HMAC header line, then this JSON), so
no node token crosses it.

Validation uses pydantic (not hand-written checks). `parse_batch` adds the checks that need
the clock (timestamps far in the future) and the cross-field ones (sample refers to a GPU
the batch does not list).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    model_validator,
)

SCHEMA_VERSION = 1
INGEST_TASK = "vigil.telemetry.ingest_batch"
INGEST_QUEUE = "ingest"

# Largest int64 DCGM uses for "blank" (docs/telemetry.md section 4); anything at or above it is a
# sentinel and must be sent as null.
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0

Finite = Annotated[float, Field(allow_inf_nan=False)]
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
Ratio = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, lt=DCGM_INT64_BLANK)]


@dataclass(frozen=True)
class Metric:
    """One column of the wide GPU or node sample."""

    name: str
    kind: Literal["float", "int"]
    unit: str
    description: str
    pytype: Any


# Order is the wire order of v1. Appending is a compatible change; anything else is v2.
GPU_FIELDS: tuple[Metric, ...] = (
    Metric("gpu_util", "float", "%", "any kernel running (NVML utilization.gpu)", Percent),
    Metric("mem_copy_util", "float", "%", "memory controller busy (utilization.memory)", Percent),
    Metric("sm_active", "float", "ratio", "SM activity (GPM / DCGM 1002)", Ratio),
    Metric("sm_occupancy", "float", "ratio", "SM occupancy (GPM / DCGM 1003)", Ratio),
    Metric("tensor_active", "float", "ratio", "tensor pipe activity (GPM / DCGM 1004)", Ratio),
    Metric("dram_active", "float", "ratio", "DRAM activity (GPM / DCGM 1005)", Ratio),
    Metric("fb_used_bytes", "int", "B", "framebuffer used", Count),
    Metric("fb_total_bytes", "int", "B", "framebuffer total", Count),
    Metric("power_w", "float", "W", "board power draw", NonNeg),
    Metric("power_limit_w", "float", "W", "enforced power limit", NonNeg),
    Metric("energy_mj", "int", "mJ", "cumulative energy counter since driver load", Count),
    Metric("gpu_temp_c", "float", "°C", "GPU core temperature", Finite),
    Metric("mem_temp_c", "float", "°C", "HBM temperature", Finite),
    Metric("sm_clock_mhz", "float", "MHz", "SM clock", NonNeg),
    Metric("mem_clock_mhz", "float", "MHz", "memory clock", NonNeg),
    Metric("clocks_event_reasons", "int", "bitmask", "clock throttle reasons", Count),
    Metric("ecc_sbe_vol", "int", "count", "single-bit ECC errors, volatile", Count),
    Metric("ecc_dbe_vol", "int", "count", "double-bit ECC errors, volatile", Count),
    Metric("ecc_sbe_agg", "int", "count", "single-bit ECC errors, aggregate", Count),
    Metric("ecc_dbe_agg", "int", "count", "double-bit ECC errors, aggregate", Count),
    Metric("remap_corr", "int", "rows", "rows remapped for correctable errors", Count),
    Metric("remap_unc", "int", "rows", "rows remapped for uncorrectable errors", Count),
    Metric("remap_pending", "int", "flag", "a remap waits for a GPU reset (0/1)", Count),
    Metric("remap_failure", "int", "flag", "a remap failed: RMA candidate (0/1)", Count),
    Metric("nvlink_crc_flit", "int", "count", "NVLink CRC flit errors, all links", Count),
    Metric("nvlink_crc_data", "int", "count", "NVLink CRC data errors, all links", Count),
    Metric("nvlink_replay", "int", "count", "NVLink replay errors, all links", Count),
    Metric("nvlink_recovery", "int", "count", "NVLink recovery errors, all links", Count),
    Metric("pcie_tx_bytes_s", "float", "B/s", "PCIe transmit throughput", NonNeg),
    Metric("pcie_rx_bytes_s", "float", "B/s", "PCIe receive throughput", NonNeg),
    Metric("pcie_replay", "int", "count", "PCIe replay counter", Count),
    Metric("pcie_gen", "int", "gen", "current PCIe link generation", Count),
    Metric("pcie_width", "int", "lanes", "current PCIe link width", Count),
    Metric("pstate", "int", "P", "performance state (0 fastest)", Count),
)

NODE_FIELDS: tuple[Metric, ...] = (
    Metric("cpu_util", "float", "%", "CPU busy, all cores", NonNeg),
    Metric("mem_util", "float", "%", "host memory used", Percent),
    Metric("net_rx_bytes_s", "float", "B/s", "Ethernet receive", NonNeg),
    Metric("net_tx_bytes_s", "float", "B/s", "Ethernet transmit", NonNeg),
    Metric("ib_rx_bytes_s", "float", "B/s", "InfiniBand receive", NonNeg),
    Metric("ib_tx_bytes_s", "float", "B/s", "InfiniBand transmit", NonNeg),
    Metric("server_power_w", "float", "W", "whole-server power (IPMI)", NonNeg),
    Metric("gpu_count", "int", "GPUs", "GPUs NVML reports now", Count),
)

GPU_FIELD_NAMES: tuple[str, ...] = tuple(m.name for m in GPU_FIELDS)
NODE_FIELD_NAMES: tuple[str, ...] = tuple(m.name for m in NODE_FIELDS)

Timestamp = Annotated[float, Field(gt=1_000_000_000, allow_inf_nan=False)]  # epoch s, UTC
GpuIndex = Annotated[int, Field(ge=0, lt=1024)]

# tuple[GpuIndex, Timestamp, <one optional value per GPU_FIELDS entry>]
GpuRow = tuple[(GpuIndex, Timestamp, *(m.pytype | None for m in GPU_FIELDS))]
NodeRow = tuple[(Timestamp, *(m.pytype | None for m in NODE_FIELDS))]

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"  # cluster and node names
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]

# PostgreSQL text cannot hold NUL (psycopg refuses it mid-COPY, after other rows of the batch
# were sent), so every text field refuses it at the edge, where the error names the field.
NO_NUL_PATTERN = r"^[^\x00]*$"
# What a node sends ends up in line-oriented text: an Xid message becomes a kernel line of the
# diagnosis, log lines are lines, names and reasons are lines of pages, emails and CSVs. A
# newline or carriage return would start a line the node chose (`<ts> node-b kernel: NVRM:
# Xid ...: 79`, blaming another node), and terminal escapes rewrite what an operator sees. So
# text refuses every C0 control but tab, and DEL; the agent cleans what it reads first
# (`clean_text`).
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
LINE_PATTERN = r"^[^\x00-\x08\x0a-\x1f\x7f]*$"
# ECMA-48 control sequences (colours, cursor moves: `ESC [ 31 m`), which tqdm, rich and the
# loggers of training frameworks write into job logs.
_ESCAPE_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def Text(max_length: int, min_length: int = 0) -> Any:  # noqa: N802 (reads as a type)
    """A bounded wire string without NUL bytes or other control characters (tab allowed)."""
    return Annotated[
        str,
        StringConstraints(min_length=min_length, max_length=max_length, pattern=LINE_PATTERN),
    ]


def clean_text(text: str) -> str:
    """`text` as the wire accepts it: terminal escape sequences dropped, every other control
    character but tab made a space (a carriage return of a progress bar, a stray newline)."""
    if not CONTROL_CHARS.search(text):
        return text
    return CONTROL_CHARS.sub(" ", _ESCAPE_SEQUENCE.sub("", text))


# --- Signed batches ------------------------------------------------------------------------
#
# A batch crosses the broker as one text: a header line naming the scheme and the HMAC, then
# the batch JSON exactly as signed. The worker checks the HMAC over the bytes after the first
# newline and parses those same bytes, so there is no re-serialisation between what was
# signed and what is stored.
#
#     vigil-hmac-sha256:<64 hex digits>\n{"v":1,"batch_id":"…","cluster":"seren",…}
#
# The HMAC key is `node_key(token)`, the token's SHA-256. The server keeps it in PostgreSQL
# only sealed under a secret of its own (webapp/fleet/services.py), so neither the token nor
# the key can be read from the database, and the token is never sent by the node. Anyone who
# can read the broker can copy and replay a signed batch, which is harmless: ingest is
# idempotent on natural keys (a replayed batch stores nothing new), and it cannot be altered
# without the key.

SIGNATURE_PREFIX = "vigil-hmac-sha256:"
_SIGNED_HEAD = len(SIGNATURE_PREFIX) + 64 + 1  # prefix, hex digest, newline


@dataclass(frozen=True)
class Signature:
    """A batch's HMAC and the exact bytes it covers (what was parsed)."""

    body: bytes
    mac: str

    def valid_for(self, key: str) -> bool:
        """Whether the HMAC was made with `key` (the node's `node_key`), in constant time."""
        return hmac.compare_digest(_mac(key, self.body), self.mac)


@dataclass(frozen=True)
class Bearer:
    """A node token presented as such (the HTTP API's Authorization header)."""

    token: str


Credential = Signature | Bearer


def node_key(token: str) -> str:
    """The HMAC key of a node: SHA-256 of its token, hex (the server stores it sealed).
    Tokens are 256 random bits, so no password stretching is needed."""
    return hashlib.sha256(token.encode()).hexdigest()


def _mac(key: str, body: bytes) -> str:
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def is_signed(text: str | bytes) -> bool:
    prefix = SIGNATURE_PREFIX if isinstance(text, str) else SIGNATURE_PREFIX.encode()
    return text.startswith(prefix)


# Every collector batch starts with the envelope in field order (agent.batch_json and the
# models' own model_dump_json), so the token is found and cut out of the text without parsing
# the whole batch, byte for byte as it was; anything else is parsed and re-serialised once.
_HEAD_TO_TOKEN = re.compile(
    r'\{"v":1,"batch_id":"[0-9a-f-]{36}","cluster":"[A-Za-z0-9._-]{1,128}",'
    r'"node":"[A-Za-z0-9._-]{1,128}",(?P<token>"token":)"'
)


def batch_sign(text: str) -> str:
    """The signed wire form of a batch (JSON text): its `token` field removed and used as the
    key. Already signed text, and text with no token to sign with (not JSON, or no `token`),
    is returned as it is: the server refuses it unsigned.
    """
    if is_signed(text):
        return text
    m = _HEAD_TO_TOKEN.match(text)
    if m is not None:
        found, end = json.decoder.scanstring(text, m.end())
        if text.startswith(",", end):
            body = text[: m.start("token")] + text[end + 1 :]
            return _signed(body, found)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    found = parsed.pop("token", None) if isinstance(parsed, dict) else None
    if not isinstance(found, str):
        return text
    return _signed(json.dumps(parsed, separators=(",", ":")), found)


def _signed(body: str, token: str) -> str:
    return f"{SIGNATURE_PREFIX}{_mac(node_key(token), body.encode())}\n{body}"


def batch_body(raw: str | bytes) -> str | bytes:
    """The batch JSON of wire text, signed or not (what a refusal log reads the sender from)."""
    return raw[_SIGNED_HEAD:] if is_signed(raw) else raw


def _unwrapped(raw: str | bytes) -> tuple[str | bytes, str | None]:
    """(the batch JSON, its HMAC or None if the text is not signed)."""
    if not is_signed(raw):
        return raw, None
    head = raw[:_SIGNED_HEAD]
    mac = head[len(SIGNATURE_PREFIX) : -1]
    if isinstance(mac, bytes):
        mac = mac.decode("ascii", "replace")
    newline = "\n" if isinstance(head, str) else b"\n"
    if not head.endswith(newline) or not re.fullmatch(r"[0-9a-f]{64}", mac):
        raise BatchError("bad_signature", "signature header: expected 64 hex digits, newline")
    return raw[_SIGNED_HEAD:], mac


# --- Size limits ---------------------------------------------------------------------------
#
# A batch of 8 GPUs x 600 intervals (100 minutes at 10 s, more than any collector sends at
# once) is 1.1 MB of JSON; Zstandard level 1 makes real telemetry about a fifth of that
# (collectors/outbox.py). The defaults leave 7x room and still bound what one bad sender can
# make a worker allocate. Servers read VIGIL_BATCH_MAX_BYTES and
# VIGIL_BATCH_MAX_COMPRESSED_BYTES (webapp/core/outbox.py); these are the defaults.
MAX_BATCH_BYTES = 8 * 2**20
MAX_BATCH_COMPRESSED_BYTES = 4 * 2**20

MAX_GPUS_PER_NODE = 64  # 8 on HGX/DGX boards; room for denser nodes
MAX_INTERVALS_PER_BATCH = 720  # 2 h at 10 s: more than --history-minutes' 20 rounds
MAX_SAMPLES_PER_BATCH = MAX_GPUS_PER_NODE * MAX_INTERVALS_PER_BATCH
MAX_EVENTS_PER_BATCH = 100_000  # job events: a Slurm watcher's first poll after downtime
MAX_NODE_EVENTS_PER_BATCH = 10_000  # node-event watchers split what they saw at this
# Scheduler node states: a whole cluster's nodes fit in one batch (a watcher's first poll).
# The largest Slurm systems have about 10,000 nodes (Frontier: 9,408, top500.org 2024); a
# watcher splits anything larger into batches of this many.
MAX_NODE_STATES_PER_BATCH = 20_000


class OversizedBatch(str):
    """Stands for a batch refused for its size before it was read whole (a bomb stops at the
    cap): the text is a note, `size_bytes` what was seen; every parse refuses it."""

    size_bytes: int

    def __new__(cls, note: str, size_bytes: int) -> OversizedBatch:
        obj = super().__new__(cls, note)
        obj.size_bytes = size_bytes
        return obj


class UnreadableBatch(str):
    """Stands for a batch that could not be read at all (an outbox entry that is not a
    Zstandard stream of UTF-8 text, a task argument that is not text): the text is a note,
    `batch_id` the id it was stored under ("" if none); every parse refuses it as
    `unreadable`."""

    batch_id: str

    def __new__(cls, note: str, batch_id: str = "") -> UnreadableBatch:
        obj = super().__new__(cls, note)
        obj.batch_id = batch_id
        return obj


class _Wire(BaseModel):
    """Every wire model: unknown keys are refused, parsed values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Envelope(_Wire):
    """What every batch carries: version, id, sender, send time.

    Who sent it is proven by a signature over the batch's exact bytes (`batch_sign`), never
    by the token itself: the broker is reachable from every node, whose users run code. The
    `token` field is only for the HTTP job-events API (a bearer token over TLS) and for
    batches made before signing; the collector's transport removes it before a batch leaves
    the node.
    """

    v: Literal[1] = SCHEMA_VERSION
    batch_id: uuid.UUID
    cluster: Name
    node: Name
    token: (
        Annotated[str, StringConstraints(min_length=16, max_length=256, pattern=NO_NUL_PATTERN)]
        | None
    ) = None
    sent_at: Timestamp
    _credential: Credential | None = PrivateAttr(default=None)

    @property
    def credential(self) -> Credential | None:
        """What proves the sender: the signature it came with, a bearer token, or None."""
        return self._credential


EnvelopeT = TypeVar("EnvelopeT", bound=_Envelope)


class GpuInfo(_Wire):
    """A GPU as the node sees it; the server registers it on first contact (keyed by UUID)."""

    index: GpuIndex
    uuid: Text(min_length=4, max_length=96)
    name: Text(max_length=96) = ""
    memory_total_bytes: Count | None = None
    pci_bus_id: Text(max_length=32) | None = None
    serial: Text(max_length=64) | None = None
    # The device's minor number (/dev/nvidiaN): what a Slurm GRES index names where gres.conf
    # lists /dev/nvidia0..N in order, and not always NVML's index (`index`). None from an
    # agent that does not report it: jobs are then matched to GPUs by index.
    minor_number: GpuIndex | None = None


class Batch(_Envelope):
    """One node's samples for one or more intervals."""

    source: Literal["nvml", "dcgm", "simulated", "replay"] = "nvml"
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    samples: list[GpuRow] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=MAX_SAMPLES_PER_BATCH
    )
    node_samples: list[NodeRow] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=MAX_INTERVALS_PER_BATCH
    )

    @model_validator(mode="after")
    def _consistent(self) -> Batch:
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError("gpus: the same index is listed twice")
        uuids = [g.uuid for g in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError("gpus: the same uuid is listed twice")
        known = set(indices)
        if not {row[0] for row in self.samples} <= known:  # one set, not a loop, when valid
            i, row = next((i, row) for i, row in enumerate(self.samples) if row[0] not in known)
            raise ValueError(f"samples[{i}]: GPU index {row[0]} is not listed in gpus")
        return self


# --- Job events (scheduler watchers: Slurm, Kubernetes, the HTTP endpoint) ---------------

JOB_EVENTS_TASK = "vigil.jobs.ingest_events"

JOB_TYPES = ("pretrain", "sft", "mllm", "eval", "debug", "other")
# Final states as schedulers name them (AcmeTrace uses Slurm's names); TIMEOUT, NODE_FAIL and
# OUT_OF_MEMORY count as failed in the characterization (AcmeTrace README).
JOB_END_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
)


class JobGpus(_Wire):
    """The GPUs a job holds on one node (indices as the node's NVML numbers them)."""

    node: Name
    gpu_indices: list[GpuIndex] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)


class JobEventIn(_Wire):
    """One change of one job: submitted, started (with its GPUs), requeued, or ended."""

    job_id: Text(min_length=1, max_length=128)
    kind: Literal["submitted", "started", "requeued", "ended"]
    ts: Timestamp
    name: Text(max_length=256) = ""
    user: Text(max_length=128) = ""
    team: Text(max_length=128) = ""
    # What the job's energy and GPU-hours are charged to (Slurm: the job's account, -A).
    project: Text(max_length=128) = ""
    partition: Text(max_length=128) = ""
    qos: Text(max_length=128) = ""
    comment: Text(max_length=1024) = ""
    # An explicit type wins over the site's type rules (e.g. a Kubernetes label).
    job_type: Literal[JOB_TYPES] | None = None  # type: ignore[valid-type]
    submit_ts: Timestamp | None = None
    start_ts: Timestamp | None = None
    end_ts: Timestamp | None = None
    state: Literal[JOB_END_STATES] | None = None  # type: ignore[valid-type]
    exit_code: Annotated[int, Field(ge=-255, le=255)] | None = None
    gpus_requested: Annotated[int, Field(ge=0, le=100_000)] | None = None
    nodes_requested: Annotated[int, Field(ge=0, le=100_000)] | None = None
    allocation: list[JobGpus] = Field(default_factory=list, max_length=100_000)
    last_checkpoint_ts: Timestamp | None = None

    @model_validator(mode="after")
    def _consistent(self) -> JobEventIn:
        submit, start, end = self.submit_ts, self.start_ts, self.end_ts
        if start is not None and submit is not None and start < submit:
            raise ValueError("start_ts is before submit_ts")
        if end is not None and start is not None and end < start:
            raise ValueError("end_ts is before start_ts (end before start)")
        if self.kind == "ended" and self.state is None:
            raise ValueError("an ended event needs its final state")
        return self


# A node as its scheduler sees it. Slurm's many states map onto these
# (collectors/watchers/slurmtext.node_state_of): up takes jobs; draining runs its last jobs
# and takes no new ones; drained takes none; down is not there (down, failed, not responding).
NODE_STATES = ("up", "draining", "drained", "down")


class NodeStateIn(_Wire):
    """A node's scheduler state, sent when it changed (drained by hand or by Vigil, resumed)."""

    node: Text(min_length=1, max_length=128)  # the scheduler's name; unknown ones are ignored
    state: Literal[NODE_STATES]  # type: ignore[valid-type]
    reason: Text(max_length=256) = ""  # why drained or down, as the scheduler says; "" if none
    since: Timestamp  # when the reason was set, or when the watcher saw the change


class JobEventBatch(_Envelope):
    """Job events and node states from one sender (a scheduler watcher or integration)."""

    source: Literal["slurm", "kubernetes", "http", "simulated", "replay"] = "slurm"
    events: list[JobEventIn] = Field(default_factory=list, max_length=MAX_EVENTS_PER_BATCH)
    node_states: list[NodeStateIn] = Field(
        default_factory=list, max_length=MAX_NODE_STATES_PER_BATCH
    )

    @model_validator(mode="after")
    def _one_state_per_node(self) -> JobEventBatch:
        seen: set[str] = set()
        for i, state in enumerate(self.node_states):
            if state.node in seen:
                raise ValueError(f"node_states[{i}]: node {state.node!r} is listed twice")
            seen.add(state.node)
        return self


def parse_job_events(
    raw: str | bytes, *, now: float | None = None, max_future_s: float = 300
) -> JobEventBatch:
    """Validate a job-event batch (JSON text); raise BatchError naming the first problem."""
    batch = _validated(JobEventBatch, raw)
    _refuse_future(
        {
            "events": [e.ts for e in batch.events],
            "node_states": [s.since for s in batch.node_states],
        },
        now,
        max_future_s,
    )
    return batch


class BatchError(ValueError):
    """A batch that must be refused whole. `reason` is a short stable code for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _validated(model: type[EnvelopeT], raw: str | bytes) -> EnvelopeT:
    """`model` from wire text (signed or not), with its credential; or BatchError naming the
    first problem (field and message)."""
    if isinstance(raw, OversizedBatch):
        raise BatchError("too_large", str(raw))
    if isinstance(raw, UnreadableBatch):
        raise BatchError("unreadable", str(raw))
    body, mac = _unwrapped(raw)
    try:
        batch = model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "batch"
        reason, message = "malformed", first["msg"]
        if (
            first["type"] in ("finite_number", "float_parsing")
            and "nan" in str(first.get("input", "")).lower()
        ):
            reason = "not_a_number"
        elif where == "v":
            reason = "unsupported_version"
        elif first["type"] == "string_pattern_mismatch" and "\x00" in str(first.get("input")):
            message = "contains a NUL byte (\\x00), which PostgreSQL text cannot hold"
        elif first["type"] == "string_pattern_mismatch" and (
            control := CONTROL_CHARS.search(str(first.get("input")))
        ):
            message = (
                f"contains the control character U+{ord(control.group()):04X}, "
                "which could forge a line of a log or a page"
            )
        raise BatchError(reason, f"{where}: {message}") from None
    if mac is not None:
        if batch.token is not None:
            raise BatchError("malformed", "token: a signed batch must not carry its token")
        body_bytes = body.encode() if isinstance(body, str) else body
        batch._credential = Signature(body_bytes, mac)
    elif batch.token is not None:
        batch._credential = Bearer(batch.token)
    return batch


def _refuse_future(stamps: dict[str, list[float]], now: float | None, max_s: float) -> None:
    """BatchError naming the first `field[i]` stamped more than `max_s` ahead of the clock.

    `stamps` maps a field to its timestamps in order; the common case (nothing in the
    future) costs one max() per field, no per-row work.
    """
    now = time.time() if now is None else now
    limit = now + max_s
    for field, values in stamps.items():
        if values and max(values) > limit:
            i, ts = next((i, ts) for i, ts in enumerate(values) if ts > limit)
            raise BatchError(
                "future_timestamp",
                f"{field}[{i}]: timestamp {ts:.0f} is {ts - now:.0f} s in the future",
            )


def parse_batch(raw: str | bytes, *, now: float | None = None, max_future_s: float = 300) -> Batch:
    """Validate a wire batch (JSON text); raise BatchError naming the first problem."""
    batch = _validated(Batch, raw)
    _refuse_future(
        {
            "samples": [row[1] for row in batch.samples],
            "node_samples": [row[0] for row in batch.node_samples],
        },
        now,
        max_future_s,
    )
    return batch


# --- Node events: GPU errors (Xid, counters) and job log windows --------------------------

NODE_EVENTS_TASK = "vigil.failures.ingest_node_events"

MAX_WINDOW_LINES = 400  # lines of one shipped log window (the error and its context)
MAX_LINE_CHARS = 4096


class GpuErrorEventIn(_Wire):
    """A GPU error seen on the node: an Xid (NVML event or kernel line) or a counter increase.

    Identical events within 5 s are coalesced by the collector; `count` says how many.
    """

    ts: Timestamp
    kind: Literal[
        "xid", "ecc_dbe", "ecc_sbe", "remap", "remap_failure", "nvlink", "pcie", "gpu_lost"
    ]
    source: Literal["nvml", "kmsg", "journal", "file", "counter", "simulated"]
    gpu_index: GpuIndex | None = None
    gpu_uuid: Text(max_length=96) | None = None
    pci_bus_id: Text(max_length=32) | None = None
    xid: Annotated[int, Field(ge=0, le=10_000)] | None = None
    delta: Annotated[int, Field(ge=0)] | None = None  # counter increase, for counter kinds
    count: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    pid: Annotated[int, Field(ge=0)] | None = None
    message: Text(max_length=2000) = ""

    @model_validator(mode="after")
    def _consistent(self) -> GpuErrorEventIn:
        if self.kind == "xid" and self.xid is None:
            raise ValueError("an xid event needs its xid code")
        return self


class LogWindowIn(_Wire):
    """Lines around an error in a running job's stdout/stderr (not the whole log)."""

    job_id: Text(min_length=1, max_length=128)
    ts: Timestamp
    path: Text(max_length=1024)
    first_line_no: Annotated[int, Field(ge=1)]
    lines: list[Text(max_length=MAX_LINE_CHARS)] = Field(max_length=MAX_WINDOW_LINES)
    trigger: Text(max_length=256) = ""


class NodeEventBatch(_Envelope):
    """GPU error events and job log windows from one node."""

    gpu_events: list[GpuErrorEventIn] = Field(
        default_factory=list, max_length=MAX_NODE_EVENTS_PER_BATCH
    )
    log_windows: list[LogWindowIn] = Field(
        default_factory=list, max_length=MAX_NODE_EVENTS_PER_BATCH
    )


def parse_node_events(
    raw: str | bytes, *, now: float | None = None, max_future_s: float = 300
) -> NodeEventBatch:
    """Validate a node-event batch (JSON text); raise BatchError naming the first problem."""
    batch = _validated(NodeEventBatch, raw)
    _refuse_future(
        {
            "gpu_events": [e.ts for e in batch.gpu_events],
            "log_windows": [w.ts for w in batch.log_windows],
        },
        now,
        max_future_s,
    )
    return batch


def clean_value(value: float | int | None) -> float | int | None:
    """Map the sentinels sources use for "no value" (NaN, DCGM blanks) to None."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and value >= DCGM_INT64_BLANK:
        return None
    return value


def new_batch_id() -> str:
    return str(uuid.uuid4())
