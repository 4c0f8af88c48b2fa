"""Divergence told by the numbers, in every common trainer's metrics format (diagnosis/metrics.py):
the dynamic loss scaler collapsing, non-finite model numbers in the last record, Megatron's
NaN-iteration counter and a loss it no longer prints; healthy records of the same formats stay
quiet. Plain functions over text: no database or broker.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text
from webapp.failures.diagnosis.metrics import record

# fairseq's epoch summary with a scale rounded to 0 (its progress bar prints three decimals).
FAIRSEQ_EPOCH = (
    "| epoch 011 | loss 4.211 | nll_loss 2.611 | ppl 6.11 | wps 81234 | ups 2 | wpb 40123.1 "
    "| bsz 1311.5 | num_updates 5120 | lr 0.0005 | gnorm 0.712 | clip 0.000 | oom 0.000 "
    "| loss_scale 0.000 | wall 2999 | train_wall 2710\n"
    "| epoch 011 | valid on 'valid' subset | loss 8.921 | nll_loss 7.502 | ppl 181.3 "
    "| num_updates 5120 | best_loss 8.7\n"
)
# fairseq's key=value progress line, then the scaler halving below 1 twice.
FAIRSEQ_INNER = (
    "2021-05-02 10:11:12 | INFO | train_inner | epoch 004:     40 / 512 loss=7.12, "
    "nll_loss=6.3, ppl=78.8, wps=21000, ups=0.1, wpb=210000, bsz=7000, num_updates=1540, "
    "lr=0.0003, gnorm=88.1, loss_scale=0.0039, train_wall=900, wall=4000\n"
    "2021-05-02 10:13:40 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss "
    "scale to: 0.001953125\n"
    "2021-05-02 10:15:02 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss "
    "scale to: 0.0009765625\n"
)
# apex's scaler between a detector's own loss lines (no "loss" key on them).
APEX = (
    "[  2]    3300 || B: 4.101 | C: 2.881 | M: 5.120 | T: 12.102 || ETA: 3 days, 1:02:03\n"
    "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.00048828125\n"
    "[  2]    3310 || B: 4.122 | C: 2.901 | M: 6.551 | T: 13.574 || ETA: 3 days, 1:01:55\n"
    "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.000244140625\n"
)
# DeepSpeed's scaler at its min_loss_scale (1), overflowing at every step.
DEEPSPEED = "".join(
    f"[2024-02-01 08:00:{s:02d},100] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] "
    f"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a:g}, reducing to {max(a / 2, 1):g}\n"
    for s, a in enumerate((4.0, 2.0, 1.0, 1.0, 1.0, 1.0))
)
# Hugging Face Trainer's logged dict: a zero loss, the grad norm and the logits NaN.
HF_DICT = (
    "{'loss': 0.6931, 'grad_norm': 3.2, 'learning_rate': 1e-06, 'logits/chosen': -1.2, "
    "'epoch': 0.0}\n"
    "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 2e-06, 'logits/chosen': nan, "
    "'logps/chosen': nan, 'epoch': 0.01}\n"
)
# Megatron's iteration line counting NaN iterations in its interval.
MEGATRON_NAN_ITERS = (
    " iteration      200/  10000 | consumed samples:        25600 | elapsed time per iteration "
    "(ms): 900.1 | learning rate: 1.200E-05 | global batch size:   128 | lm loss: 6.120E+00 "
    "| loss scale: 1.0 | grad norm: 1.021 | number of skipped iterations:   0 "
    "| number of nan iterations:   3 |\n"
)
# A single Megatron iteration line with no loss field: Megatron prints a loss only if its
# average is above 0, which a NaN fails.
MEGATRON_NO_LOSS = (
    " iteration        9/      10 | consumed samples:          108 | elapsed time per iteration "
    "(ms): 1979.2 | learning rate: 4.219E-07 | global batch size:    12 | loss scale: 1.0 "
    "| actual seqlen:  4096 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
)
# PyTorch Lightning's progress bar and a wandb run summary.
LIGHTNING = (
    "Epoch 3:  45%|████▌     | 450/1000 [00:30<00:37, 14.7it/s, loss=0.412, v_num=1]\n"
    "Epoch 3:  46%|████▌     | 460/1000 [00:31<00:36, 14.7it/s, loss=nan, v_num=1]\n"
)
WANDB = (
    "wandb: Run summary:\nwandb:       epoch 3\nwandb:  train/loss nan\nwandb:          lr 0.0001\n"
)
# Python's numeric guard and autograd's anomaly mode.
FLOATING_POINT = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 80, in <module>\n'
    "    probs = np.exp(logits)\n"
    "FloatingPointError: overflow encountered in exp\n"
)
ANOMALY = "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.\n"

# Hugging Face's trainer zeroing a NaN loss, one record.
HF_ZERO_LOSS = "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1.9e-05, 'epoch': 0.12}\n"
# DeepSpeed's engine progress: every step between the last two records skipped.
DEEPSPEED_STEPS = "".join(
    f"[2023-01-01 10:00:0{i},100] [INFO] [logging.py:60:log_dist] [Rank 0] step={100 + 10 * i}, "
    f"skipped={90 + 10 * i}, lr=[0.0001], mom=[(0.9, 0.999)]\n"
    for i in range(3)
)
# The trainers' and frameworks' own words for a non-finite loss.
GUARDS = [
    "Loss is nan, stopping training\n",
    "ValueError: The loss returned in `training_step` is nan.\n",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: loss : Tensor had NaN values\n",
    "WARNING:root:NaN or Inf found in input tensor.\n",
]

# DeepSpeed's scaler at its floor, unable to reduce further, twice at the end of an excerpt.
DEEPSPEED_STUCK = (
    "[2023-06-07 22:31:20,118] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1\n"
    " 14%|█▍        | 385/2724 [14:13:31<85:33:12, 131.70s/it]\n"
    "[2023-06-07 22:33:31,907] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
    " 14%|█▍        | 386/2724 [14:15:43<85:31:02, 131.70s/it]\n"
    "[2023-06-07 22:35:43,551] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
)

DIVERGED = [
    DEEPSPEED_STUCK,
    HF_ZERO_LOSS,
    DEEPSPEED_STEPS,
    *GUARDS,
    FAIRSEQ_EPOCH,
    FAIRSEQ_INNER,
    APEX,
    DEEPSPEED,
    HF_DICT,
    MEGATRON_NAN_ITERS,
    MEGATRON_NO_LOSS,
    LIGHTNING,
    WANDB,
    FLOATING_POINT,
    ANOMALY,
]

# The same formats, healthy: a scale that is high or falls once, one NaN grad norm the scaler
# skipped, bf16's fixed scale of 1, counters at 0.
HEALTHY = [
    "| epoch 002 | loss 5.1 | nll_loss 4.2 | gnorm 0.9 | loss_scale 16 | wall 800\n",
    "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0\n"
    "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0\n",
    # Below 1 but still learning (the loss falling), above the floor.
    "| WARNING: overflow detected, setting loss scale to: 0.0078125\n"
    "| WARNING: overflow detected, setting loss scale to: 0.00390625\n"
    "| epoch 001:    500 / 1374 loss=12.636, ppl=6365.15, gnorm=2.302, loss_scale=0.004\n",
    "{'loss': 1.2, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.3}\n"
    "{'loss': 1.1, 'grad_norm': 0.8, 'learning_rate': 1e-05, 'epoch': 0.4}\n",
    MEGATRON_NAN_ITERS.replace("nan iterations:   3", "nan iterations:   0"),
    # A best-so-far that starts at inf, before a script's own exception.
    "| epoch 001 | loss 7.1 | gnorm 1.2 | best_loss inf | loss_scale 128 |\n"
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 9, in <module>\n'
    "    evaluate(model, cfg['valid'])\n"
    "KeyError: 'valid'\n",
    "Epoch 3:  46%|████▌     | 460/1000 [00:31<00:36, 14.7it/s, loss=0.401, v_num=1]\n",
    # DeepSpeed's scaler calibrating at start-up: the skipped count stops growing.
    DEEPSPEED_STEPS.replace("skipped=100", "skipped=90").replace("skipped=110", "skipped=90"),
]


@pytest.mark.parametrize("log", DIVERGED)
def test_divergence_in_the_numbers_is_loss_nan(log: str) -> None:
    got = diagnose_text(log)
    assert got.cause == "loss_nan", (got.cause, got.rule_id, got.detail)


@pytest.mark.parametrize("log", HEALTHY)
def test_healthy_records_of_the_same_formats_are_no_divergence(log: str) -> None:
    assert diagnose_text(log).cause != "loss_nan"


def test_one_parser_reads_every_format_by_the_same_names() -> None:
    assert record(FAIRSEQ_EPOCH.splitlines()[0])["loss_scale"] == 0.0
    assert record(FAIRSEQ_INNER.splitlines()[0])["gnorm"] == 88.1
    assert record(MEGATRON_NAN_ITERS)["lm_loss"] == 6.12
    assert record(MEGATRON_NAN_ITERS)["number_of_nan_iterations"] == 3
    assert record(APEX.splitlines()[1]) == {"loss_scale": 0.00048828125}
    assert record(HF_DICT.splitlines()[0])["grad_norm"] == 3.2
    assert record("wandb:  train/loss 0.25") == {"loss": 0.25}


def test_lines_and_fields_past_their_bounds_are_not_read() -> None:
    # What a metrics record costs is bounded whatever a job prints (a long word is read once).
    assert record("loss " + "a" * 5000 + " 1.0") == {}
    assert record("grad_norm " + "x" * 300 + " nan | loss: 2.5") == {"loss": 2.5}
