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


def test_caffes_saturated_softmax_loss_is_a_divergence_however_short_the_log():
    # chuckcho/video-caffe#11: two test losses, 3.31 then 87.3366, Caffe's clamp -log(FLT_MIN):
    # every sample's true class at probability 0. The factor (26x) alone proves nothing.
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


def test_a_hundredfold_jump_in_a_short_log_diverged():
    log = "".join(
        f"{{'loss': {v}, 'learning_rate': 0.0001, 'epoch': 0.1}}\n" for v in (0.91, 212.7)
    )
    got = diagnose_text(log)
    assert got.cause == "loss_nan", got.detail


def test_a_short_log_ending_on_a_fortyfold_spike_that_healthy_runs_show_is_not_a_divergence():
    # open-mmlab/mmdetection#11708 (tests/data/loss_curves): 1.50 -> 63.13 in one interval at
    # the start of an epoch, and the run normalised afterwards.
    log = (
        "Epoch(train)  [2][ 50/788]  lr: 2.0000e-03  grad_norm: 3.4572  loss: 1.5043\n"
        "Epoch(train)  [2][100/788]  lr: 2.0000e-03  grad_norm: 31101415.5974  loss: 63.1261\n"
    )
    assert diagnose_text(log).cause != "loss_nan"


def test_nan_grad_norms_beside_a_loss_that_holds_are_the_scaler_skipping_steps():
    # OpenDriveLab/Birds-eye-view-Perception#13: mmcv's interval-mean grad norm is nan at every
    # interval of an fp16 epoch while the loss holds at 4.2-4.4.
    log = "".join(
        f"2022-12-05 17:15:45,490 - mmdet - INFO - Epoch [12][{i}/3953]\tlr: 3.604e-06, "
        f"loss_cls: 0.2377, loss_bbox: 0.4749, loss: {v}, grad_norm: nan\n"
        for i, v in ((1400, 4.4046), (1450, 4.1711), (1500, 4.1975))
    )
    assert diagnose_text(log).cause != "loss_nan"


def test_nan_grad_norms_beside_a_zeroed_loss_still_diverged():
    # AnswerDotAI/ModernBERT#233: Hugging Face's Trainer zeroes a NaN loss.
    log = "".join(
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.9e-05, 'epoch': 0.01}\n"
        for _ in range(3)
    )
    assert diagnose_text(log).cause == "loss_nan"


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


# Records whose fields are separated by spaces only, each trainer's own format.
COMPOSER_NAN = (
    "[batch=120/4800]:\n"
    "\t Train time/batch: 119\n"
    "\t Train loss/train/total: 2.4512\n"
    "[batch=121/4800]:\n"
    "\t Train time/batch: 120\n"
    "\t Train loss/train/total: nan\n"
)
MMENGINE_ZEROED = (
    "2024/05/10 15:46:31 - mmengine - INFO - Epoch(train)  [2][ 50/788]  lr: 2.0000e-03  "
    "eta: 4:14:00  time: 0.8167  data_time: 0.0169  memory: 15943  grad_norm: 3.4572  "
    "loss: 1.5043  loss_cls: 0.8781  loss_bbox: 0.6262\n"
    "2024/05/10 15:47:12 - mmengine - INFO - Epoch(train)  [2][100/788]  lr: 2.0000e-03  "
    "eta: 4:12:59  time: 0.8248  data_time: 0.0158  memory: 15871  grad_norm: nan  "
    "loss: 0.0000  loss_cls: 0.0000  loss_bbox: 0.0000\n"
)
HEALTHY_SPACED = {
    "detectron2": (
        "[08/21 15:48:06 d2.utils.events]:  eta: 2:36:14  iter: 19  total_loss: 20.71  "
        "loss_cls: 18.63  loss_box_wh: 3.366  time: 0.0750  data_time: 0.0180  lr: 0.0004  "
        "max_mem: 411M\n"
        "[08/21 15:48:08 d2.utils.events]:  eta: 2:39:49  iter: 39  total_loss: 12.1  "
        "loss_cls: 8.956  loss_box_wh: 1.814  time: 0.0758  data_time: 0.0027  lr: 0.0008  "
        "max_mem: 411M\n"
    ),
    "torchtitan": (
        "[rank0]:[titan] 2024-09-01 10:00:00,000 - root - INFO - step:  1  loss: 12.2345  "
        "memory: 30.50GiB(38.61%)  tps: 1,234  mfu: 30.12%\n"
        "[rank0]:[titan] 2024-09-01 10:00:10,000 - root - INFO - step: 10  loss:  9.8765  "
        "memory: 30.50GiB(38.61%)  tps: 5,678  mfu: 41.02%\n"
    ),
    "mmengine_inf_grad_once": (
        "2024/05/10 15:47:54 - mmengine - INFO - Epoch(train)  [2][150/788]  lr: 2.0000e-03  "
        "grad_norm: inf  loss: 1.4921  loss_cls: 0.8610  loss_bbox: 0.6311\n"
    ),
}


def test_composers_nan_loss_record_over_several_lines_is_a_divergence():
    # composer's ConsoleLogger names the loss loss/train/total: its last value NaN.
    got = diagnose_text(COMPOSER_NAN)
    assert got.cause == "loss_nan", got.detail


def test_a_space_separated_record_with_a_zeroed_loss_and_a_nan_grad_norm_is_a_divergence():
    # mmengine's log line: a loss of exactly 0 beside a NaN grad norm is a NaN loss zeroed.
    got = diagnose_text(MMENGINE_ZEROED)
    assert got.cause == "loss_nan", got.detail


@pytest.mark.parametrize("name", sorted(HEALTHY_SPACED))
def test_healthy_space_separated_records_stay_quiet(name):
    # One inf grad norm among finite losses is an fp16 overflow the scaler skips.
    assert diagnose_text(HEALTHY_SPACED[name]).cause != "loss_nan", name


def _fused_overflows(scales: list[float]) -> str:
    # DeepSpeed's fp16 optimizer reports each overflow in three lines (fused_optimizer.py).
    return "".join(
        f"[INFO] [fused_optimizer.py:362:_update_scale] Grad overflow on iteration {i}\n"
        f"[INFO] [fused_optimizer.py:363:_update_scale] Reducing dynamic loss scale from {a} "
        f"to {max(a / 2, 1.0)}\n"
        f"[INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted "
        f"loss scale: {a}, reducing to {max(a / 2, 1.0)}\n"
        f"steps: {i} loss: 10.6554 iter time (s): 4.218 samples/sec: 7.586\n"
        for i, a in enumerate(scales, start=3000)
    )


def test_deepspeeds_three_line_overflow_report_halving_at_every_step_diverged():
    # Each overflow's two reductions count once: five halvings, 64 down to 2.
    got = diagnose_text(_fused_overflows([64.0, 32.0, 16.0, 8.0, 4.0]))
    assert got.cause == "loss_nan", got.detail
    assert "loss scale fell to 2" in got.detail


def test_deepspeeds_hysteresis_lines_do_not_end_a_run_of_overflows():
    log = "".join(
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
        f"{a}, but hysteresis is 2. Reducing hysteresis to 1\n"
        f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to "
        f"{max(a // 2, 1)}\n"
        for a in (16, 8, 4, 2, 1)
    )
    got = diagnose_text(log)
    assert got.cause == "loss_nan", got.detail


def test_deepspeeds_three_line_overflow_report_at_start_up_is_not_a_divergence():
    assert diagnose_text(_fused_overflows([65536.0, 32768.0, 16384.0, 8192.0, 4096.0])).cause != (
        "loss_nan"
    )


# A training script's own bare table: `print(step, loss)`, `print(f"{step}\t{loss}")`, a csv
# writer's `step,loss` rows; numbers only, the step first (docs/diagnosis-metrics.md).
def _bare(rows: list[tuple[int, str]], sep: str = " ") -> str:
    return "".join(f"{step}{sep}{value}\n" for step, value in rows)


_FALLING = [(s, f"{3.2 - s / 500:.4f}") for s in range(10, 410, 10)]
BARE_DIVERGED = {
    "space": _bare(_FALLING + [(410, "nan"), (420, "nan"), (430, "nan")]),
    "tab": _bare(_FALLING + [(410, "nan"), (420, "nan")], sep="\t"),
    "csv_with_header": "step,loss\n" + _bare(_FALLING + [(410, "inf"), (420, "nan")], sep=","),
    # The NaN persists across a checkpoint reload the script announces between two rows.
    "across_a_reload": _bare(_FALLING + [(410, "nan")])
    + "saving checkpoint\nrestoring from checkpoint\n"
    + _bare([(420, "nan"), (430, "nan")]),
    # A header naming one loss column among others: that column is read.
    "header_names_the_loss": "epoch,loss,accuracy\n"
    + "".join(f"{e},{2.3 - e / 10:.4f},{0.1 + e / 40:.4f}\n" for e in range(1, 15))
    + "15,nan,0.1000\n16,nan,0.1000\n",
    # Spike with no recovery: a falling loss, then four rows far above it.
    "spike": _bare(_FALLING + [(410, "7.9"), (420, "8.4"), (430, "9.1"), (440, "9.6")]),
}


@pytest.mark.parametrize("name", sorted(BARE_DIVERGED))
def test_a_bare_step_loss_table_that_diverged_is_a_loss_divergence(name):
    got = diagnose_text(BARE_DIVERGED[name])
    assert got.cause == "loss_nan", (name, got.cause, got.detail)
    assert "table" in got.detail


BARE_QUIET = {
    # One NaN is not a divergence: the rule needs it to persist.
    "one_nan": _bare(_FALLING + [(410, "nan")]),
    "one_nan_then_finite": _bare(_FALLING + [(410, "nan"), (420, "nan"), (430, "2.41")]),
    # Values that rise are not a loss: an accuracy, a memory or a throughput column.
    "rising_accuracy": _bare([(s, f"{0.1 + s / 1000:.4f}") for s in range(10, 500, 10)]),
    "rising_memory": _bare([(s, f"{1000 + s * 3.5:.1f}") for s in range(10, 500, 10)]),
    # Three columns and no header: which one is the loss is not known.
    "three_columns": _bare(
        [(s, f"{s // 100} {3.2 - s / 500:.4f}") for s in range(10, 410, 10)]
        + [(410, "4 nan"), (420, "4 nan")]
    ),
    # A header that names no loss column (a GAN's G and D, signed).
    "header_without_loss": "step,G,D\n"
    + _bare(
        [(s, f"{(-1) ** s * 3.1:.3f},{-7.2:.3f}") for s in range(1, 30)]
        + [(30, "nan,nan"), (31, "nan,nan")],
        sep=",",
    ),
    # A step column that is not strictly increasing is not a run of logging steps.
    "steps_not_increasing": _bare(_FALLING[:10] + [(10, "nan"), (10, "nan"), (10, "nan")]),
    # pandas prints a Series as index and value, NaN included, with its own footer.
    "pandas_series": _bare(
        [(i, f"{1.5 + i / 10:.1f}") for i in range(8)] + [(8, "NaN"), (9, "NaN")]
    )
    + "Name: price, dtype: float64\n",
    # A signed series (a GAN's generator loss, an ELBO) is no loss curve to spike.
    "signed_series": _bare([(s, f"{(-1) ** s * (s % 7 + 1):.3f}") for s in range(1, 40)]),
}


@pytest.mark.parametrize("name", sorted(BARE_QUIET))
def test_a_bare_table_that_is_not_a_diverged_loss_stays_quiet(name):
    got = diagnose_text(BARE_QUIET[name])
    assert got.cause != "loss_nan", (name, got.detail)


def test_healthy_bare_tables_never_alarm_at_any_point_they_could_have_ended():
    # Every prefix of the healthy bare tables of tests/data/loss_curves (README there): each is
    # one chance of a false alarm, as the loss-curve calibration counts them.
    from pathlib import Path

    curves = Path(__file__).resolve().parents[1] / "data" / "loss_curves"
    names = sorted(p.name for p in curves.glob("healthy_bare_*"))
    assert names
    for name in names:
        lines = (curves / name).read_text(encoding="utf-8").splitlines(keepends=True)
        for end in range(1, len(lines) + 1):
            got = diagnose_text("".join(lines[:end]))
            assert got.cause != "loss_nan", (name, end, got.detail)


# `print(loss)` or `print(step, loss)` of a torch scalar tensor: its repr, `tensor(x, device=...,
# grad_fn=<...>)` (torch/_tensor_str.py), read as the number it holds.
TENSOR_DIVERGED = {
    "tensor_only": "tensor(3.2207, device='cuda:0')\n" + "tensor(nan, device='cuda:0')\n" * 4,
    "step_and_tensor": "".join(
        f"{s} tensor({3.2 - s / 500:.4f}, device='cuda:0', grad_fn=<NllLossBackward0>)\n"
        for s in range(10, 200, 10)
    )
    + "200 tensor(nan, device='cuda:0', grad_fn=<NllLossBackward0>)\n" * 1
    + "210 tensor(nan, device='cuda:0', grad_fn=<NllLossBackward0>)\n",
}


@pytest.mark.parametrize("name", sorted(TENSOR_DIVERGED))
def test_a_printed_scalar_tensor_series_that_turned_nan_is_a_loss_divergence(name):
    got = diagnose_text(TENSOR_DIVERGED[name])
    assert got.cause == "loss_nan", (name, got.cause, got.detail)


def test_a_printed_scalar_tensor_series_with_one_nan_stays_quiet():
    log = "".join(f"tensor({2.3 - i / 10:.4f}, device='cuda:0')\n" for i in range(6))
    assert diagnose_text(log + "tensor(nan, device='cuda:0')\n").cause != "loss_nan"
