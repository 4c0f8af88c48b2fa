"""Each Xid acts as NVIDIA's Xid catalog says (docs/xid-catalog.md): a kernel line of it beside a
failed job gets the action class of its resolution, through the diagnosis engine, and
`taxonomy.xid_action` reads what the line itself says (Xid 154's recovery phrase, Xid 48's
row-remap state, "caused by previous Xid N")."""

from __future__ import annotations

import pytest

from webapp.failures import taxonomy, xid_catalog
from webapp.failures.diagnosis import diagnose_text
from webapp.failures.taxonomy import Action

JOB_LOG = "step 120 loss 2.31\nsrun: error: node-07: task 0: Exited with exit code 1\n"
# What takes a node out of service (drained): never for an Xid NVIDIA says to ignore.
NODE_ACTIONS = {Action.CORDON_RESTART, Action.RESET_GPU, Action.REBOOT, Action.ESCALATE}
GPU_CAUSES = {"gpu_ecc", "gpu_nvlink", "gpu_off_bus", "gpu_firmware"}


def kernel_line(code: int, text: str = "pid=4242, name=python, channel 0x2") -> str:
    return f"node-07 kernel: NVRM: Xid (PCI:0000:3b:00): {code}, {text}\n"


def diagnosed(*lines: str):
    return diagnose_text(JOB_LOG, kernel_log="".join(lines))


# The resolution buckets' action classes (docs/xid-catalog.md section 3).
BY_RESOLUTION = {
    "RESTART_APP": Action.RESTART,
    "CHECK_UVM": Action.RESTART,
    "RESET_GPU": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "CONTACT_SUPPORT": Action.ESCALATE,
    "CHECK_MECHANICALS": Action.ESCALATE,
    "UPDATE_SWFW": Action.ESCALATE,
    # Alone (no remap state read): NVIDIA's workflow resets the GPU.
    "WORKFLOW_XID_48": Action.RESET_GPU,
    # The link's registers need a person to decode: drained, the job restarted elsewhere.
    "WORKFLOW_NVLINK_ERR": Action.CORDON_RESTART,
    "WORKFLOW_NVLINK5_ERR": Action.CORDON_RESTART,
}
CATALOG = xid_catalog.catalog_load()


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_every_catalog_xid_beside_a_failed_job_gets_its_resolutions_action(code):
    entry = CATALOG[code]
    d = diagnosed(kernel_line(code))
    expected = BY_RESOLUTION.get(entry.immediate)
    if entry.immediate in ("RESTART_APP", "CHECK_UVM"):
        # The job's own category: it restarts and the node stays in service.
        assert (d.category, d.action) == ("framework", "restart"), entry
    elif expected is not None:
        assert d.action == expected, entry
        assert d.category == "infrastructure"
    elif entry.immediate == "IGNORE":
        # Recorded, never a cause: the job's failure is explained by nothing else here.
        assert (d.cause, d.action) == ("unknown", "notify"), entry
        told = entry.investigatory == "CONTACT_SUPPORT"
        assert taxonomy.xid_action(code) == (Action.NOTIFY if told else Action.NONE)
    elif code in (167, 168):
        # No resolution in the catalog: kept as the taxonomy maps them (a lost or shrunk GPU).
        assert d.action == Action.CORDON_RESTART
    else:
        # 45 alone, 154 with no phrase, and the power-smoothing and other codes with no
        # resolution: evidence only, no node action.
        assert d.cause == "unknown" and d.action not in NODE_ACTIONS, entry


@pytest.mark.parametrize("code", [63, 92, 157])
def test_xids_nvidia_says_to_ignore_never_drain_the_node(code):
    d = diagnosed(kernel_line(code, "pid=4242, name=python, row remap or ECC rate event"))
    assert d.cause not in GPU_CAUSES and d.action not in NODE_ACTIONS
    assert taxonomy.xid_info(code).page is (code != 63)  # 92, 157: operators are told
    expected = Action.NONE if code == 63 else Action.NOTIFY
    assert taxonomy.xid_action(code, kernel_line(code)) == expected


@pytest.mark.parametrize("code", [109, 136])
def test_reset_gpu_xids_reset_the_gpu(code):
    d = diagnosed(kernel_line(code))
    assert (d.action, d.category, d.blamed_node) == ("reset_gpu", "infrastructure", "node-07")


def test_xid_79_reboots_the_node():
    d = diagnosed(kernel_line(79, "pid=48213, GPU has fallen off the bus."))
    assert (d.cause, d.action, d.blamed_node) == ("gpu_off_bus", "reboot", "node-07")


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("0x1 (GPU Reset Required)", Action.RESET_GPU),
        ("0x2 (Node Reboot Required)", Action.REBOOT),
        ("0x3 (Drain P2P)", Action.RESET_GPU),
        ("0x4 (Drain and Reset)", Action.RESET_GPU),
    ],
)
def test_xid_154_does_the_recovery_the_driver_names(phrase, expected):
    line = kernel_line(154, f"GPU recovery action changed from 0x0 (None) to {phrase}")
    assert taxonomy.xid_action(154, line) == expected
    d = diagnosed(line)
    assert (d.action, d.blamed_node) == (expected, "node-07")


def test_xid_154_back_to_none_asks_for_nothing():
    line = kernel_line(
        154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    )
    assert taxonomy.xid_action(154, line) == Action.NONE
    assert diagnosed(line).cause == "unknown"


def test_xid_45_after_48_follows_the_double_bit_error():
    d = diagnosed(
        kernel_line(48, "An uncorrectable double bit error (DBE) has been detected on GPU"),
        kernel_line(45, "pid=4242, name=python, Ch 00000010"),
    )
    assert (d.cause, d.action) == ("gpu_ecc", "reset_gpu")
    # The cleanup line alone names its root.
    named = kernel_line(45, "pid=4242, name=python, Ch 00000010, caused by previous Xid 48")
    assert taxonomy.xid_action(45, named) == Action.RESET_GPU
    assert diagnosed(named).action == "reset_gpu"
    assert taxonomy.xid_action(45, kernel_line(45)) == Action.NOTIFY  # alone: the fabric manager


@pytest.mark.parametrize(
    ("state", "expected"),
    [(None, Action.RESET_GPU), ("pending", Action.RESET_GPU), ("failure", Action.ESCALATE)],
)
def test_xid_48_follows_the_gpus_row_remap_state(state, expected):
    assert taxonomy.xid_action(48, kernel_line(48), state) == expected
    # The evidence line carries the state the agent sampled (failures/evidence.py).
    if state:
        line = kernel_line(48, f"DBE detected {taxonomy.remap_note(state)}")
        assert diagnosed(line).action == expected


def test_a_bad_remap_state_is_refused_by_name():
    with pytest.raises(ValueError, match="remap state 'maybe'"):
        taxonomy.xid_action(48, "", "maybe")
