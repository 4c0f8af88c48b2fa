"""The failure label set: causes, categories, actions, Acme aliases, ordering tiers and Xids.

This module is the one home of the labels (STYLE.md, convention 1). Everything here is copied
from `docs/failure-taxonomy.md` (binding: it wins on conflict), the Xid mapping from
`docs/failure-signatures.md` section 1 and `docs/telemetry.md` section 5; each Xid's NVIDIA
resolutions from the Xid catalog file (`xid_catalog.py`, docs/xid-catalog.md). Plain Python, no
Django: the rule engine, the CLI and (later) the models' choices all read it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from webapp.failures.xid_catalog import catalog_load


class Category(StrEnum):
    # Acme, NSDI'24 Table 3 (infrastructure, framework, script), plus scheduler end states
    # that are not failures of the job (outcome) and "nothing matched" (unknown).
    INFRASTRUCTURE = "infrastructure"
    FRAMEWORK = "framework"
    SCRIPT = "script"
    OUTCOME = "outcome"
    UNKNOWN = "unknown"


class Action(StrEnum):
    RESTART = "restart"
    CORDON_RESTART = "cordon_restart"
    LOCATE_RESTART = "locate_restart"
    RETRY = "retry"
    ROLLBACK_SKIP = "rollback_skip"
    NOTIFY = "notify"
    ESCALATE = "escalate"
    NONE = "none"


@dataclass(frozen=True)
class Cause:
    name: str
    category: Category
    # The paper's label(s); the first is used unless the detail (an exception name) is listed.
    acme_aliases: tuple[str, ...]
    action: Action
    typical: str


_I, _F, _S, _O = Category.INFRASTRUCTURE, Category.FRAMEWORK, Category.SCRIPT, Category.OUTCOME

# The table of docs/failure-taxonomy.md, in its order.
CAUSES: dict[str, Cause] = {
    c.name: c
    for c in (
        Cause("gpu_nvlink", _I, ("NVLinkError",), Action.CORDON_RESTART, "Xid 74, 144-150"),
        Cause("gpu_ecc", _I, ("ECCError",), Action.CORDON_RESTART, "Xid 48, 63/64, 92, 94, 95"),
        Cause("gpu_off_bus", _I, ("NodeFailure",), Action.CORDON_RESTART, "Xid 79"),
        Cause("gpu_firmware", _I, ("CUDAError",), Action.CORDON_RESTART, "Xid 61, 62, 119, 120"),
        Cause("node_lost", _I, ("NodeFailure",), Action.CORDON_RESTART, "Slurm NODE_FAIL"),
        Cause("ib_link", _I, ("NetworkError",), Action.CORDON_RESTART, "NET/IB status=12"),
        Cause("aux_connection", _I, ("ConnectionError",), Action.RETRY, "ECONNRESET, refused"),
        Cause("object_storage", _I, ("S3StorageError",), Action.RETRY, "botocore, SlowDown"),
        Cause("filesystem", _I, ("OSError",), Action.ESCALATE, "ENOSPC, EIO, stale handle"),
        Cause("nccl_timeout", _I, ("NCCLTimeoutError",), Action.LOCATE_RESTART, "watchdog"),
        Cause("nccl_remote", _I, ("NCCLRemoteError",), Action.LOCATE_RESTART, "remote peer"),
        Cause("cuda_fault", _F, ("CUDAError",), Action.RESTART, "illegal memory access"),
        # The taxonomy writes "(native crash)", a label the paper's table does not have.
        Cause("native_crash", _F, (), Action.RESTART, "Segmentation fault, SIGABRT"),
        Cause("dataloader_killed", _F, ("DataloaderKilled",), Action.NOTIFY, "shm bus error"),
        Cause("gpu_oom", _F, ("OutOfMemoryError",), Action.NOTIFY, "CUDA out of memory"),
        # loss_nan and host_oom: the taxonomy writes "(loss spike)" and "(OS / OOM)", labels
        # the paper's failure table does not have, so they carry no Acme alias.
        Cause("loss_nan", _F, (), Action.ROLLBACK_SKIP, "NaN grad norm, loss spike"),
        Cause("model_loading", _F, ("ModelLoadingError",), Action.NOTIFY, "loading state_dict"),
        Cause("dataset_loading", _F, ("DatasetLoadingError",), Action.NOTIFY, "datasets"),
        Cause(
            "framework_exception",
            _F,
            ("RuntimeError", "AssertionError", "ValueError", "AttributeError", "ZeroDivisionError"),
            Action.NOTIFY,
            "exception raised from library frames",
        ),
        Cause("host_oom", _S, (), Action.NOTIFY, "oom_kill event"),
        Cause(
            "user_exception",
            _S,
            (
                "TypeError",
                "NameError",
                "KeyError",
                "IndexError",
                "SyntaxError",
                "ImportError",
                "FileNotFoundError",
                "PermissionError",
                "CalledProcessError",
                "ArgumentError",
            ),
            Action.NOTIFY,
            "exception raised from the user's own frames",
        ),
        Cause("cancelled", _O, (), Action.NONE, "CANCELLED AT ... (no reason)"),
        Cause("timeout", _O, (), Action.NONE, "DUE TO TIME LIMIT"),
        Cause("preempted", _O, (), Action.RESTART, "DUE TO PREEMPTION"),
        Cause("requeued", _O, (), Action.NONE, "DUE TO JOB REQUEUE"),
        Cause("unknown", Category.UNKNOWN, (), Action.NOTIFY, "nothing matched"),
    )
}

# Exception classes that are not listed as aliases but are subclasses of one that is (Python's
# own hierarchy), so the Acme alias stays inside the paper's label set.
EXCEPTION_ALIAS: dict[str, str] = {
    "ModuleNotFoundError": "ImportError",
    "IndentationError": "SyntaxError",
    "TabError": "SyntaxError",
    "UnboundLocalError": "NameError",
    "NotImplementedError": "RuntimeError",
    "RecursionError": "RuntimeError",
    "JSONDecodeError": "ValueError",
    "UnicodeDecodeError": "ValueError",
    "UnicodeEncodeError": "ValueError",
    "FloatingPointError": "ZeroDivisionError",
    "IsADirectoryError": "FileNotFoundError",
    "NotADirectoryError": "FileNotFoundError",
}

# Which side of the framework/script split an exception falls on when no traceback frame is
# available to decide (docs/failure-taxonomy.md lists the names per cause).
EXCEPTION_DEFAULT_CAUSE: dict[str, str] = {
    alias: cause
    for cause in ("framework_exception", "user_exception")
    for alias in CAUSES[cause].acme_aliases
}


def acme_alias(cause: str, detail: str | None = None) -> str | None:
    """The paper's label for a cause; for the exception causes the exception name decides."""
    aliases = CAUSES[cause].acme_aliases
    if not aliases:
        return None
    if detail:
        name = EXCEPTION_ALIAS.get(detail, detail)
        if name in aliases:
            return name
    return aliases[0]


# Ordering, docs/failure-taxonomy.md step 3: "hardware (Xid, ECC, IB completion error) > CUDA fault
# > Python exception > network symptom > NCCL timeout / hang > scheduler outcome". Our
# refinements, each placed where the taxonomy's reasoning puts it:
# - node: a lost node, host OOM kill or storage stall explains every later error of the job,
#   but a GPU Xid on that node explains the node loss, so node comes right after hardware.
#   A filesystem errno (ENOSPC, EIO, ESTALE) or an unreachable object store is placed here
#   too: it is the root cause of the framework frame that reports it and of the crash after.
# - hardware_warning: Xid 63/92 (row remap pending, single-bit rate) let a job go on
#   (docs/failure-signatures.md "C (warn)"): they only decide when no exception explains the exit.
# - weak: exit signals (SIGKILL, SIGBUS) and step cancels that the scheduler itself causes;
#   they decide only when nothing else, not even a scheduler outcome, is there.
# - reason: a scheduler record that names the reason (TIME LIMIT, PREEMPTION, JOB REQUEUE)
#   outranks the exceptions and timeouts it caused on the ranks (docs/failure-taxonomy.md step 3);
#   NODE FAILURE is a cause of the node tier already.
# - native: "CUDA fault > native crash > Python exception" (docs/failure-taxonomy.md step 3).
TIERS: tuple[str, ...] = (
    "hardware",
    "node",
    "reason",
    "cuda",
    "native",
    "exception",
    "hardware_warning",
    "network",
    "hang",
    "outcome",
    "weak",
)
TIER_RANK: dict[str, int] = {name: i for i, name in enumerate(TIERS)}


@dataclass(frozen=True)
class Xid:
    code: int
    meaning: str
    cause: str | None  # None: not a cause by itself (attached to the root Xid of the burst)
    tier: str  # one of TIERS; "ignore" for trailing / informational codes
    action: Action | None = None  # per-code override of the cause's default action
    page: bool = False  # page someone: a critical GPU error opens a gpu_error failure at once
    # From NVIDIA's Xid catalog (xid_catalog.py). `immediate` / `investigatory`: its resolution
    # buckets (RESTART_APP, RESET_GPU, ...; "" where the catalog gives none); None for a code
    # the catalog file does not list, whose resolution is unknown.
    mnemonic: str = ""
    description: str = ""
    immediate: str | None = None
    investigatory: str | None = None
    applies_to: tuple[str, ...] = ()


def _xids(
    cause: str | None,
    tier: str,
    codes: dict[int, str],
    action: Action | None = None,
    page: frozenset[int] = frozenset(),
) -> dict[int, Xid]:
    return {
        code: Xid(code, meaning, cause, tier, action, code in page)
        for code, meaning in codes.items()
    }


# Xid table: docs/failure-taxonomy.md names 48, 61-64, 74, 79, 92, 94, 95, 119, 120, 144-150;
# docs/failure-signatures.md proposes 140 -> gpu_ecc, 46/110/143/158 -> gpu_firmware, 167 ->
# gpu_off_bus and 8/13/31/32/43/69/109 as evidence for cuda_fault; docs/telemetry.md section 5
# says 156/157 behave like 63/64 and 168 (reduced memory capacity) like a memory fault.
# `page`: docs/telemetry.md section 5, "page" column (154 pages only with a recovery action > 0,
# which a plain Xid event does not carry, so it does not page here).
_MAPPED: dict[int, Xid] = {
    **_xids(
        "gpu_ecc",
        "hardware",
        {48: "double-bit ECC error", 95: "uncontained ECC error"},
        page=frozenset({48, 95}),
    ),
    **_xids(
        "gpu_ecc",
        "hardware",
        {64: "row remap failure", 140: "unrecovered ECC escape"},
        page=frozenset({64, 140}),
    ),
    **_xids("gpu_ecc", "hardware", {157: "resource retirement failure"}),
    **_xids("gpu_ecc", "hardware", {168: "reduced memory capacity"}),
    # Xid 94: only that GPU's application dies; restart, cordon on repeat (signatures section 1).
    **_xids("gpu_ecc", "hardware", {94: "contained ECC error"}, Action.RESTART),
    **_xids(
        "gpu_ecc",
        "hardware_warning",
        {
            63: "row remap pending (reset GPU to activate)",
            92: "high single-bit ECC error rate",
            156: "resource retirement event",
        },
    ),
    **_xids(
        "gpu_nvlink",
        "hardware",
        {74: "NVLink error", 155: "NVLink software error"},
        page=frozenset({74}),
    ),
    **_xids("gpu_nvlink", "hardware", {c: "NVLink5 sub-unit error" for c in range(144, 151)}),
    **_xids("gpu_off_bus", "hardware", {79: "GPU has fallen off the bus"}, page=frozenset({79})),
    **_xids("gpu_off_bus", "hardware", {167: "PCIe fatal timeout"}),
    **_xids(
        "gpu_firmware",
        "hardware",
        {
            46: "GPU timeout",
            61: "micro-controller breakpoint",
            62: "micro-controller halt",
            110: "security fault",
            119: "GSP RPC timeout",
            120: "GSP error",
            143: "GPU initialization error",
            158: "GPU fatal timeout",
        },
        page=frozenset({62, 119, 120, 143}),
    ),
    # Application-class Xids never cordon a node by default (docs/telemetry.md section 5).
    **_xids(
        "cuda_fault",
        "cuda",
        {
            8: "GPU stopped processing",
            13: "graphics engine exception",
            31: "GPU memory page fault",
            32: "corrupted push buffer",
            43: "GPU stopped processing (reset channel)",
            68: "NVDEC exception",
            69: "graphics class error",
            109: "context-switch timeout",
        },
    ),
    **_xids(
        None,
        "ignore",
        {
            45: "cleanup after earlier errors",
            93: "InfoROM erase limit",
            154: "recovery action changed",
            162: "power-smoothing state change",
            163: "power-smoothing state change",
            164: "power-smoothing state change",
            165: "power-smoothing state change",
        },
    ),
}


def _with_catalog(mapped: dict[int, Xid]) -> dict[int, Xid]:
    """Every Xid of the catalog file, with its resolutions; a code mapped above keeps its cause,
    tier, action and page, and one the catalog does not list (61, unused since Ampere) stays as
    mapped, with no resolution. A catalog code with no mapping is evidence only (no cause)."""
    out: dict[int, Xid] = {}
    for code, entry in catalog_load().items():
        base = mapped.get(code) or Xid(code, entry.description, None, "ignore")
        out[code] = replace(
            base,
            mnemonic=entry.mnemonic,
            description=entry.description,
            immediate=entry.immediate,
            investigatory=entry.investigatory,
            applies_to=entry.applies_to,
        )
    for code, xid in mapped.items():
        out.setdefault(code, xid)
    return dict(sorted(out.items()))


XIDS: dict[int, Xid] = _with_catalog(_MAPPED)


def xid_info(code: int) -> Xid:
    """The table row for an Xid. A code neither the catalog file nor the mapping lists (a newer
    driver's) is kept as evidence only: no cause, resolution None (unknown), never an error."""
    return XIDS.get(code) or Xid(code, "Xid not in the catalogue", None, "ignore")


def cause_choices() -> list[tuple[str, str]]:
    """(value, label) pairs for a model field or a form."""
    return [(name, name.replace("_", " ")) for name in CAUSES]
