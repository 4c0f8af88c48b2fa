"""The GPU reset and the reboot as Slurm command lines (data first), and the input they refuse
with a message naming it. The real Slurm runs them in test_slurm_reset.py."""

from __future__ import annotations

import pytest

from webapp.recovery.executors import Target, executor_for
from webapp.recovery.executors.base import UnsupportedAction

BUS = "00000000:18:00.0"


def target(kind: str, **kw) -> Target:
    return Target(action_id=7, kind=kind, cause="gpu_firmware", failure_id=123, **kw)


def test_a_reset_waits_reserves_resumes_into_the_reservation_then_resets_by_bus_id(settings):
    settings.VIGIL_SLURM_USER = "vigil"
    params = {"bus_id": BUS, "reservation": "vigil-reset-9-n1"}
    wait, reserve, resume, reset = executor_for("slurm").commands(
        target("reset_gpu", host="n1", params=params)
    )
    assert wait[:3] == ["squeue", "-h", "--nodelist=n1"]
    assert reserve == [
        "scontrol", "create", "reservation", "ReservationName=vigil-reset-9-n1", "Nodes=n1",
        "StartTime=now", "Duration=UNLIMITED", "Users=vigil", "Flags=MAINT,IGNORE_JOBS",
    ]  # fmt: skip
    assert resume == ["scontrol", "update", "NodeName=n1", "State=RESUME"]
    assert reset[0] == "sbatch" and "--export=NONE" in reset and "--nodelist=n1" in reset
    assert "--reservation=vigil-reset-9-n1" in reset
    assert reset[-1] == f"--wrap=nvidia-smi -r -i {BUS}"


def test_the_check_after_a_reset_runs_in_its_reservation_and_the_resume_ends_it():
    held = {"reservation": "vigil-reset-9-n1", "reserved": True}
    (check,) = executor_for("slurm").commands(
        target("health_check", params={**held, "hosts": ["n1"]})
    )
    assert check[0] == "sbatch" and "--reservation=vigil-reset-9-n1" in check
    assert executor_for("slurm").commands(target("resume", host="n1", params=held)) == [
        ["scontrol", "delete", "ReservationName=vigil-reset-9-n1"]
    ]


def test_a_reboot_goes_through_slurm_with_the_reason():
    assert executor_for("slurm").commands(target("reboot", host="n1")) == [
        ["scontrol", "reboot", "ASAP", "nextstate=RESUME",
         "reason=vigil: gpu_firmware failure 123", "n1"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"bus_id": "18:00.0; reboot", "reservation": "vigil-r"}, "is not a PCI bus id"),
        ({"bus_id": "", "reservation": "vigil-r"}, "is not a PCI bus id"),
        ({"bus_id": BUS, "reservation": "maint"}, "is not one of Vigil's"),
    ],
)
def test_a_bad_bus_id_or_reservation_is_refused_naming_it(params, message):
    with pytest.raises(UnsupportedAction, match=message):
        executor_for("slurm").commands(target("reset_gpu", host="n1", params=params))


def test_kubernetes_says_it_cannot_reset_a_gpu():
    with pytest.raises(UnsupportedAction, match="kubernetes cannot run a reset_gpu action"):
        executor_for("kubernetes").commands(target("reset_gpu", host="n1"))
