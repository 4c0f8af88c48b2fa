"""The training metrics a log prints, read as (key, value) records whatever the trainer's format.

Trainers print one record per logging step in a handful of shapes, and all of them are a list
of keys, each followed by a number:

- Hugging Face Trainer's logged dict: `{'loss': 0.0, 'grad_norm': nan, 'epoch': 0.01}`;
- fairseq's progress lines: `| epoch 028 | loss 3.976 | gnorm 0.635 | loss_scale 0.000 |` and
  `loss=9.44, nll_loss=8.44, gnorm=156.036, loss_scale=0`;
- Megatron's iteration lines: `iteration 9/ 10 | lm loss: 3.2E+00 | loss scale: 1.0 |
  grad norm: 0.9 | number of skipped iterations: 0 | number of nan iterations: 0 |`;
- PyTorch Lightning's progress bar (`loss=0.123, v_num=1`), mmdetection's and detectron2's
  `loss: 0.53, loss_cls: 0.21`, YOLACT's `|| B: 5.495 | C: 3.668 ||`, a wandb run summary
  (`wandb:  train/loss nan`).

`record(line)` returns the pairs of one line under a normalised key (lower case, spaces and
dashes as `_`, a `train/` style prefix dropped), so that the decision (decide.py) asks for the
loss, the grad norm, the loss scale or the skip counters by one name whichever trainer printed
them. The scaler's own lines (apex's "reducing loss scale to", DeepSpeed's "Attempted loss
scale: x, reducing to y", fairseq's "setting loss scale to: x") are read as a loss-scale value.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"[-+]?(?:nan|inf(?:inity)?|\d+\.?\d*(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?)"
# A field ends in its value: after `:`, `=`, a quote or a space, a number that ends the field.
# The key is read from the words before it (below), not by a pattern: a pattern that searched
# for a key of words would retry at every letter of a long word (quadratic in its length).
_VALUE_END = re.compile(r"[:=\s'\"](" + _NUMBER + r")['\"]?\s*$", re.I)
_KEY_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_/.\-]*")
KEY_WORDS = 5  # "number of skipped iterations" has 4
# Metrics lines are short (a Megatron iteration line is about 400 characters, an mmdetection
# one with every head's loss about 1,500); longer ones are not read, nor longer fields.
MAX_LINE_CHARS = 4096
MAX_FIELD_CHARS = 256
_SEPARATORS = re.compile(r"\|\|?|,\s|[{}]|\s-\s|\t")
# The scaler's own lines: the scale it falls back to.
_SCALER = re.compile(
    r"(?:reducing|setting) loss scale to:? (" + _NUMBER + r")|Attempted loss scale: \S+, "
    r"reducing to (" + _NUMBER + r")|Reducing dynamic loss scale from \S+ to (" + _NUMBER + r")",
    re.I,
)
# Keys by what they measure (after normalisation).
LOSS_SCALE_KEYS = frozenset({"loss_scale", "scale", "loss_scaler", "scaler"})
GRAD_NORM_KEYS = frozenset({"grad_norm", "gnorm", "gradient_norm", "total_norm", "grad_norm_avg"})
SKIPPED_KEY = "number_of_skipped_iterations"
NAN_ITERS_KEY = "number_of_nan_iterations"
# Keys whose value says nothing about the model's numbers (a non-finite one is not a divergence).
_BOOKKEEPING = frozenset(
    {
        "epoch",
        "step",
        "iteration",
        "lr",
        "learning_rate",
        "wps",
        "ups",
        "wpb",
        "bsz",
        "num_updates",
        "wall",
        "train_wall",
        "eta",
        "timer",
        "v_num",
        "clip",
        "oom",
        "it/s",
        "time",
        "data_time",
        "memory",
    }
)
# Only lines that carry one of these are worth splitting (the decision asks nothing else).
INTERESTING = ("loss", "norm", "scale", "nan", "inf", "skipped")


# The last part of a `/` key that names how a metric was reduced, not what it is: composer's
# `loss/train/total` is the loss (its ConsoleLogger, composer/loggers/console_logger.py).
_REDUCTIONS = frozenset({"total", "mean", "avg", "sum"})


def normalised(key: str) -> str:
    """`lm loss` -> lm_loss, `train/loss` -> loss, `Grad-Norm` -> grad_norm,
    `loss/train/total` -> loss."""
    key = key.strip().lower().replace("-", "_").replace(" ", "_")
    if "/" not in key or key.endswith("/s"):
        return key
    parts = key.split("/")
    return parts[0] if parts[-1] in _REDUCTIONS and parts[0] else parts[-1]


def _key(head: str) -> str | None:
    """The key a field's words end with ("lm loss:" -> "lm loss"), None if it has none."""
    words: list[str] = []
    for token in reversed(head.rstrip(" \t:='\"").split()):
        token = token.strip("'\"")
        if not _KEY_WORD.fullmatch(token) or (words and token.endswith(".")):
            break
        words.append(token)
        if len(words) == KEY_WORDS:
            break
    return " ".join(reversed(words)) or None


def record(line: str) -> dict[str, float]:
    """The metrics one line prints, by normalised key (the first value of a key wins)."""
    low = line.lower()
    if len(line) > MAX_LINE_CHARS or not any(word in low for word in INTERESTING):
        return {}
    out: dict[str, float] = {}
    m = _SCALER.search(line) if "scale" in low else None
    if m:
        out["loss_scale"] = float(next(g for g in m.groups() if g))
    for field in _SEPARATORS.split(line):
        field = field.strip()
        if not field or len(field) > MAX_FIELD_CHARS:
            continue
        vm = _VALUE_END.search(" " + field)
        raw = _key(" " + field[: vm.start(1) - 1]) if vm else None
        if raw is None:
            continue
        key = normalised(raw)
        # "setting loss scale to: x" read above; "iteration 9/ 10" is a counter, not a metric.
        if key.endswith("_to") or key in out:
            continue
        try:
            out[key] = float(vm.group(1))
        except ValueError:
            continue
    _spaced_pairs(line, out)
    return out


# A one-word key and its value among fields separated by spaces only, which the separators
# above do not cut: detectron2's `iter: 19  total_loss: 20.71  loss_cls: 18.63`
# (detectron2/utils/events.py, CommonMetricPrinter), mmengine's `lr: 2.0e-03  grad_norm: 3.4
# loss: 1.5` (mmengine/runner/log_processor.py), torchtitan's `step:  1  loss: 12.23  memory:`
# (torchtitan/train.py), PaddleDetection's `learning_rate: 0.0001 loss: 3.12 eta: 1:00:00`
# (ppdet/utils/logger.py), TensorFlow Estimator's `loss = 0.693, step = 100` and a progress
# bar's last postfix `loss=2.345]`. A token ending in `:` followed by a number, `=` inside a
# token, or ` = ` between two tokens; read by one pass over the tokens (linear in the line).
_KEY_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_/.\-]*")
_NUMBER_TOKEN = re.compile(_NUMBER, re.I)


def _spaced_pairs(line: str, out: dict[str, float]) -> None:
    """Add to `out` the one-word `key: value`, `key=value` and `key = value` pairs of a line
    whose keys are not in it yet."""
    tokens = line.split()
    for i, token in enumerate(tokens):
        if token.endswith(":") and i + 1 < len(tokens):
            # After a plain word, the key has several words ("lm loss:", "nan iterations:"),
            # read by the fields above; a word that is the previous key's value ("loss: nan
            # loss_cls:") is not one.
            before = tokens[i - 1] if i else ""
            value_before = i > 1 and tokens[i - 2].endswith(":")
            if _KEY_TOKEN.fullmatch(before) and not (
                value_before and _NUMBER_TOKEN.fullmatch(before)
            ):
                continue
            raw, value = token[:-1], tokens[i + 1]
        elif "=" in token and not token.endswith("="):
            raw, _, value = token.partition("=")
        elif token == "=" and 0 < i < len(tokens) - 1:
            raw, value = tokens[i - 1], tokens[i + 1]
        else:
            continue
        # A logger's prefix glued to the key ("INFO:tensorflow:loss") is not part of it.
        raw = raw.rsplit(":", 1)[-1].lstrip("[({'\"").rstrip("'\"")
        value = value.strip("[](){}'\",;")
        if not _KEY_TOKEN.fullmatch(raw) or not _NUMBER_TOKEN.fullmatch(value):
            continue
        key = normalised(raw)
        if key not in out and not key.endswith("_to"):
            try:
                out[key] = float(value)
            except ValueError:
                continue


def is_loss_key(key: str) -> bool:
    """A loss the trainer prints (loss, lm_loss, nll_loss, loss_cls...), never the scaler's."""
    return key not in LOSS_SCALE_KEYS and (
        key == "loss" or key.endswith("_loss") or key.startswith("loss_")
    )


# A best-so-far or a bound starts at inf before the first evaluation ("best_loss inf",
# "best_val_loss: inf"): not the model's numbers either.
_RUNNING_BEST = ("best", "min_", "max_", "lowest", "prev")


def nonfinite_model_values(rec: dict[str, float]) -> list[str]:
    """Keys of a record whose value is NaN or inf and says something of the model's numbers."""
    return [
        k
        for k, v in rec.items()
        if not math.isfinite(v)
        and k not in _BOOKKEEPING
        and k not in LOSS_SCALE_KEYS
        and not k.startswith(_RUNNING_BEST)
    ]
