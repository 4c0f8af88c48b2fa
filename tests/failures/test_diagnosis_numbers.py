"""Divergence told by the numbers and by the trainers' own guards (docs/diagnosis-metrics.md):
the guard table of families_training.py, the short-series cases of divergence.py, and the
healthy curves they must leave alone. Plain functions over text: no database or broker."""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text
from webapp.failures.diagnosis.families_training import TRAINER_NONFINITE_GUARDS

# Each trainer's guard as its users paste it: a traceback ending in the guard's own words.
GUARD_LOGS = {
    # mmdetection's SSDHead assert (open-mmlab/mmdetection#2448): read as a user's assertion
    # before the table.
    "mmdet_ssd": (
        "2020-04-14 10:51:30,850 - mmdet - INFO - Epoch [1][5/1564]      lr: 0.00068, "
        "loss_cls: 403423626349.0533, loss_bbox: 22096496443.6824, loss: 425520111323.9357\n"
        ' File "/home/u/mmdetection/mmdet/models/anchor_heads/ssd_head.py", line 187, in loss\n'
        "    'classification scores become infinite or NaN!'\n"
        "AssertionError: classification scores become infinite or NaN!\n"
    ),
    "mmdet_hook": (
        "Traceback (most recent call last):\n"
        '  File "tools/train.py", line 10, in <module>\n'
        "    main()\n"
        "AssertionError: loss become infinite or NaN!\n"
    ),
    "megatron_forward": (
        "Traceback (most recent call last):\n"
        '  File "pretrain_gpt.py", line 120, in loss_func\n'
        "    assert not loss.isnan(), (\n"
        "AssertionError: Rank 3: found NaN in local forward loss calculation. Device: 3, "
        "node: gpu-07\n"
    ),
    "paddle_check_nan_inf": (
        "RuntimeError: (PreconditionNotMet) There are NAN or INF (num_nan=12, num_inf=0, "
        "num_zero=0) in [device=gpu:0, op=matmul_v2, tensor=linear_0.tmp_0, dtype=fp32].\n"
    ),
    "lightning_early_stopping": (
        "Epoch 7: 100%|##########| 500/500 [01:10<00:00, 7.10it/s, v_num=3]\n"
        "Monitored metric val_loss = nan is not finite. Previous best value was 0.512. "
        "Signaling Trainer to stop.\n"
    ),
    "detectron2_rpn": (
        '  File "detectron2/modeling/proposal_generator/proposal_utils.py", line 103, in '
        "find_top_rpn_proposals\n"
        "    raise FloatingPointError(\n"
        "FloatingPointError: Predicted boxes or scores contain Inf/NaN. Training has diverged.\n"
    ),
}


@pytest.mark.parametrize("name", sorted(GUARD_LOGS))
def test_a_trainers_own_non_finite_guard_is_a_loss_divergence(name):
    got = diagnose_text(GUARD_LOGS[name])
    assert got.cause == "loss_nan", (name, got.cause, got.detail)
    assert got.action == "rollback_skip"


@pytest.mark.parametrize("example", TRAINER_NONFINITE_GUARDS.examples)
def test_every_guard_of_the_table_alone_is_read_as_loss_nan(example):
    assert diagnose_text(example + "\n").cause == "loss_nan", example


def test_a_short_log_whose_loss_jumps_tenfold_diverged():
    # chuckcho/video-caffe#11: two test losses, 3.31 then 87.34 (Caffe's softmax loss
    # saturating), and the log ends: no value after to show a recovery.
    log = (
        "Iteration 18000, Testing net (#0)\n"
        "Test net output #2: loss = 3.30735 (* 1 = 3.30735 loss)\n"
        "Iteration 19000, Testing net (#0)\n"
        "Test net output #2: loss = 87.3366 (* 1 = 87.3366 loss)\n"
    )
    got = diagnose_text(log)
    assert got.cause == "loss_nan", got.detail
    assert "87.3366" in got.evidence[0].text


def test_a_short_log_ending_on_a_one_line_spike_is_not_a_divergence():
    # LLaVA#918's healthy stretch (tests/data/loss_curves): 0.66, 0.80, then 4.27 (6.4x), and
    # the run came back; cut there, the log must not read as diverged.
    log = "".join(
        f"{{'loss': {v}, 'learning_rate': 0.000176, 'epoch': 0.24}}\n"
        for v in (0.6623, 0.8022, 4.2653)
    )
    assert diagnose_text(log).cause != "loss_nan"


def test_a_small_jump_over_two_iterations_is_left_undecided():
    # A factor under 10 in two values is within what healthy curves show: no guess.
    log = (
        " iteration        1/   55000 | lm_loss: 2.275809E+00 | number of skipped iterations:"
        "   0 | number of nan iterations:   0 |\n"
        " iteration        2/   55000 | lm_loss: 1.105449E+01 | number of skipped iterations:"
        "   0 | number of nan iterations:   0 |\n"
    )
    assert diagnose_text(log).cause != "loss_nan"


def _overflows(scales: list[int]) -> str:
    return "".join(
        "[INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step."
        f" Attempted loss scale: {a}, reducing to {a // 2}\n"
        f"{{'loss': 2.0491, 'learning_rate': 0.000196, 'epoch': 0.28}}\n"
        for a in scales
    )


def test_a_loss_scale_halved_at_every_overflow_down_to_one_above_its_floor_diverged():
    # ymcui/Chinese-LLaMA-Alpaca#534: 64 -> 32 -> 16 -> 8 -> 4 -> 2 over five steps, the next
    # overflow stopping DeepSpeed at its floor of 1.
    got = diagnose_text(_overflows([64, 32, 16, 8, 4]))
    assert got.cause == "loss_nan", got.detail
    assert "loss scale fell to 2" in got.detail


def test_the_scalers_calibration_at_start_up_is_not_a_divergence():
    # DeepSpeed halves from 2**16 at the first steps while it finds its scale
    # (deepspeedai/DeepSpeed#931): five halvings in a row far above the floor.
    assert diagnose_text(_overflows([65536, 32768, 16384, 8192, 4096])).cause != "loss_nan"


def test_a_scale_at_two_not_reached_by_halvings_in_a_row_is_not_read_as_a_collapse():
    # The scale went back up between overflows (4 then 8 attempted): the scaler was not
    # overflowing at every step, so one halving above the floor alone says nothing.
    assert diagnose_text(_overflows([64, 32, 4, 8, 4])).cause != "loss_nan"
