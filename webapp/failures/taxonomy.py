"""The failure label set: causes, categories, actions, Acme aliases, ordering tiers and Xids.

This module is the one home of the labels. Everything here is copied
from `docs/failure-taxonomy.md` (binding: it wins on conflict), the Xid mapping from
`docs/failure-signatures.md` section 1 and `docs/telemetry.md` section 5; each Xid's NVIDIA
resolutions from the Xid catalog file (`xid_catalog.py`, docs/xid-catalog.md). Plain Python, no
Django: the rule engine, the CLI and (later) the models' choices all read it.
"""

from __future__ import annotations

import re
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
    # NVIDIA's Xid catalog buckets RESET_GPU and RESTART_BM / RESTART_VM (docs/xid-catalog.md):
    # the node is drained, then its GPU reset or the node rebooted, then health-checked.
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"


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
    # The JVM's counterparts of a failed import: a class missing from the job's classpath.
    "ClassNotFoundException": "ImportError",
    "NoClassDefFoundError": "ImportError",
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


# What each resolution bucket of NVIDIA's Xid catalog does (docs/xid-catalog.md section 3). The
# catalog wins over the mapping above where they disagree (docs/telemetry.md section 5).
# RESTART_APP, CHECK_UVM: the job's own category, the job restarts, the node stays in service
# (CHECK_UVM resets only with UVM / vGPU, which Slurm nodes here do not run).
JOB_RESOLUTIONS = frozenset({"RESTART_APP", "CHECK_UVM"})
# The node-level buckets: drained, then the GPU reset, the node rebooted, or a person called in
# (never resumed by Vigil). WORKFLOW_XID_48 resets unless the row remap failed (xid_action).
NODE_RESOLUTIONS: dict[str, Action] = {
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "CONTACT_SUPPORT": Action.ESCALATE,
    "CHECK_MECHANICALS": Action.ESCALATE,
    "UPDATE_SWFW": Action.ESCALATE,
}
# The buckets whose Xid is no failure cause by itself: IGNORE, and the two that follow another
# Xid (45's root, 154's phrase: xid_resolved).
NO_CAUSE_RESOLUTIONS = frozenset({"IGNORE", "WORKFLOW_XID_45", "XID_154"})
_HARDWARE_CAUSES = frozenset({"gpu_ecc", "gpu_nvlink", "gpu_off_bus", "gpu_firmware"})


def _hardware_cause(base: Xid | None, mnemonic: str) -> str:
    """A GPU cause for a node-level Xid: the mapping's when it has one, else from the catalog's
    mnemonic (memory, link, bus), else the GPU's engines and firmware."""
    if base is not None and base.cause in _HARDWARE_CAUSES:
        return base.cause
    m = mnemonic.upper()
    if "ECC" in m or "DRAM" in m or "RETIREMENT" in m:
        return "gpu_ecc"
    if "NVLINK" in m or "ALI_TRAINING" in m or "C2C" in m:
        return "gpu_nvlink"
    if "FALLEN_OFF" in m or "PCIE" in m:
        return "gpu_off_bus"
    return "gpu_firmware"


def _by_resolution(
    code: int, base: Xid | None, immediate: str, investigatory: str, mnemonic: str
) -> Xid:
    """The Xid's cause, tier, action and page flag as its immediate resolution says."""
    row = base or Xid(code, "", None, "ignore")
    if immediate in JOB_RESOLUTIONS:
        # Keep a job-side cause the mapping names (cuda_fault); the node is never drained.
        keep = base is not None and base.cause is not None and base.tier == "cuda"
        cause = base.cause if keep else "cuda_fault"
        return replace(row, cause=cause, tier="cuda", action=Action.RESTART, page=False)
    if immediate in NODE_RESOLUTIONS:
        return replace(
            row,
            cause=_hardware_cause(base, mnemonic),
            tier="hardware",
            action=NODE_RESOLUTIONS[immediate],
            page=True,
        )
    if immediate in NO_CAUSE_RESOLUTIONS:
        # Recorded on the GPU's history only. Where a recurrence asks for support (92, 157),
        # operators are told once per incident (page), without a drain.
        told = investigatory == "CONTACT_SUPPORT"
        return replace(row, cause=None, tier="ignore", action=None, page=told)
    # WORKFLOW_NVLINK_ERR / WORKFLOW_NVLINK5_ERR (the link's registers need decoding) and the
    # codes the catalog gives no resolution (162-172): as mapped, or evidence only.
    return row


def _with_catalog(mapped: dict[int, Xid]) -> dict[int, Xid]:
    """Every Xid of the catalog file, with its resolutions, acting as its resolution says. One
    the catalog does not list (61, unused since Ampere) stays as mapped, with no resolution."""
    out: dict[int, Xid] = {}
    for code, entry in catalog_load().items():
        base = _by_resolution(
            code, mapped.get(code), entry.immediate, entry.investigatory, entry.mnemonic
        )
        out[code] = replace(
            base,
            meaning=base.meaning or entry.description,
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


# --- Reading one Xid line ----------------------------------------------------------------------

_PREVIOUS_XID = re.compile(r"caused by previous Xid (\d+)", re.I)
# Xid 154 names the recovery the GPU needs: "GPU recovery action changed from 0x0 (None) to 0x1
# (GPU Reset Required)". The values are NVML's recovery action field (docs/telemetry.md section
# 2, `recovery_action`): 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset,
# 5 IMEX recovery, 6 bus reset, 7 system reboot.
_RECOVERY_TO = re.compile(r"\bto\s+(?:0x[0-9a-f]+\s*)?\(([^)]*)\)", re.I)
RECOVERY_PHRASES: dict[str, Action] = {
    "none": Action.NONE,
    "gpu reset required": Action.RESET_GPU,
    "node reboot required": Action.REBOOT,
    # P2P traffic through the GPU is unsafe until it is reset: drain first, then reset (every
    # reset runs on a drained node).
    "drain p2p": Action.RESET_GPU,
    "drain and reset": Action.RESET_GPU,
    "imex recovery": Action.ESCALATE,
    "bus reset": Action.RESET_GPU,
    "system reboot": Action.REBOOT,
}
# NVIDIA's Xid 48 workflow reads the GPU's row-remap state (NVML, the agent's `remap_pending`
# and `remap_failure` samples): pending -> reset the GPU to apply the remap; failure (no spare
# row left) -> the GPU needs replacing.
REMAP_STATES = ("pending", "failure")
_REMAP_NOTE = re.compile(r"\[row remap (pending|failure)\]", re.I)


def remap_note(state: str) -> str:
    """How an Xid 48 line rendered from the agent's events carries the GPU's row-remap state
    (failures/evidence.py writes it, xid_resolved reads it back)."""
    if state not in REMAP_STATES:
        raise ValueError(f"remap state {state!r} is not one of {', '.join(REMAP_STATES)}")
    return f"[row remap {state}]"


def _recovery_phrase(line: str) -> Action | None:
    """The action of the recovery Xid 154 changed to; None when the line names none known."""
    m = _RECOVERY_TO.search(line)
    if m:
        return RECOVERY_PHRASES.get(m.group(1).strip().lower())
    low = line.lower()
    hits = [a for phrase, a in RECOVERY_PHRASES.items() if phrase != "none" and phrase in low]
    return hits[-1] if hits else None


def xid_resolved(code: int, line: str = "", remap_state: str | None = None) -> Xid:
    """The table row an Xid line acts by, once the line's own words are read: the root Xid of
    "caused by previous Xid N", the recovery Xid 154 names, Xid 48's row-remap state (given,
    or carried in the line as `remap_note` writes it). Raises ValueError for a remap state
    other than REMAP_STATES or None."""
    if remap_state is not None and remap_state not in REMAP_STATES:
        raise ValueError(
            f"remap state {remap_state!r} is not one of {', '.join(REMAP_STATES)} or None"
        )
    xid = xid_info(code)
    if xid.cause is None:
        pm = _PREVIOUS_XID.search(line)
        if pm and int(pm.group(1)) != code:
            # "Xid 45 ... caused by previous Xid 149": the cleanup names the root, which may
            # be all that is left of a burst (NVIDIA/open-gpu-kernel-modules#1150).
            return xid_resolved(int(pm.group(1)), "", remap_state)
    if xid.immediate == "XID_154":
        action = _recovery_phrase(line)
        if action is None or action == Action.NONE:
            return xid
        cause = "gpu_off_bus" if action == Action.REBOOT else "gpu_firmware"
        return replace(xid, cause=cause, tier="hardware", action=action, page=True)
    if xid.immediate == "WORKFLOW_XID_48":
        if remap_state is None:
            nm = _REMAP_NOTE.search(line)
            remap_state = nm.group(1).lower() if nm else None
        if remap_state == "failure":
            return replace(xid, action=Action.ESCALATE)
    return xid


def xid_action(code: int, line: str = "", remap_state: str | None = None) -> Action:
    """What to do about one Xid line, as NVIDIA's catalog says (docs/xid-catalog.md): the node
    action for node-level Xids, RESTART for the job's own, NOTIFY for an ignorable Xid whose
    recurrence asks for support (92, 157) and for Xid 45 alone (its fabric manager), NONE for
    the rest. See xid_resolved for what the line and `remap_state` decide."""
    xid = xid_resolved(code, line, remap_state)
    if xid.cause is None:
        if xid.immediate == "WORKFLOW_XID_45":
            return Action.NOTIFY
        return Action.NOTIFY if xid.page else Action.NONE
    return xid.action or CAUSES[xid.cause].action
