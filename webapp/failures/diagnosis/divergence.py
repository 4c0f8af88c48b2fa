"""Divergence told by the numbers at the end of a log: the loss curve (NaN/inf last, a spike
with no recovery, an explosion), non-finite grad norms, a collapsed or stuck fp16 loss scaler,
Megatron's iteration lines and the metrics records (metrics.py) of any trainer. Each becomes a
loss_nan event for the decision (decide.py).
"""

from __future__ import annotations

import itertools
import math
import re

import webapp.failures.diagnosis.metrics as metrics
from webapp.failures.diagnosis.catalogue import Catalogue
from webapp.failures.diagnosis.events import EVIDENCE_TEXT_CHARS, Event
from webapp.failures.diagnosis.lines import parse_line

# Loss spike with no recovery (docs/failure-signatures.md section 4: "loss > k x moving average
# with no recovery in W steps"): each of the last LOSS_SPIKE_STEPS printed values above
# LOSS_SPIKE_FACTOR x the baseline, the LOSS_BASELINE_QUANTILE of the up to LOSS_BASELINE_STEPS
# values before them. A low quantile, not the median: a divergence that has run on fills the
# baseline window with its own values (LightningDOT#5: 0.6 to 30-200 for 15 printed values),
# and up to three quarters of them leave the quantile where the healthy run was. k and W were
# chosen on the real loss logs of tests/data/loss_curves (README there): over every point where
# a healthy stretch could end, min(last W) / baseline reached 1.17 at most (W = 4), while the
# diverged runs read 7.9 to 1e23 at their end; W = 4 lines leaves one-line spikes that
# recover (LLaVA#918: 0.8 -> 4.27 -> 0.77) unflagged, and k = 2 sits between the two.
LOSS_SPIKE_FACTOR = 2.0
LOSS_SPIKE_STEPS = 4
LOSS_BASELINE_STEPS = 50
LOSS_BASELINE_QUANTILE = 0.25
# A NaN or inf loss at the very end of the log is the loss-curve rule's strongest form (the
# spike needs a baseline, a non-finite value does not): as sure as an explicit NaN line
# (rule loss-nan-grad-norm, 0.9).
NONFINITE_LOSS_CONFIDENCE = 0.9
# A short curve (a few printed values, as small runs and pasted excerpts have) still shows a
# spike: the baseline needs this many values before the last LOSS_SPIKE_STEPS
# (ml-explore/mlx-examples#620: train loss 1.4 -> 6.4 and no recovery within 9 values).
LOSS_BASELINE_MIN = 3
# A loss that explodes: its last LOSS_EXPLODE_STEPS values above LOSS_EXPLODE_FACTOR times the
# lowest value before them, or its last value alone above LOSS_JUMP_FACTOR times the lowest of at
# least LOSS_JUMP_BEFORE values before it, however short the curve (a pasted excerpt of a few
# log intervals: mmdetection's losses going 0.85 -> 2.4 -> 6e4 -> 1e13). On the healthy
# stretches of tests/data/loss_curves the last two values never exceed 2.6x the lowest before
# them and one value 6.4x (LLaVA#918's one-line spike); in no log of another cause in any corpus
# does a value exceed 20x the lowest before it. 100x and 1000x leave a wide margin.
LOSS_EXPLODE_FACTOR = 100.0
LOSS_EXPLODE_STEPS = 2
LOSS_JUMP_FACTOR = 1000.0
LOSS_JUMP_BEFORE = 2
# A log of only a few printed losses (fewer than the spike rule needs, LOSS_SPIKE_STEPS +
# LOSS_BASELINE_MIN) whose last value is above SHORT_JUMP_FACTOR times the lowest one before it,
# with no value after it to show a recovery. Healthy runs do jump that way for one logged
# interval: mmengine's loss 1.50 -> 63.13 (42x) at the start of an epoch, then back to normal
# (open-mmlab/mmdetection#11708, tests/data/loss_curves), and LLaVA#918's 6.4x; 100x keeps a
# margin over both (in the logs of other causes of every corpus whose whole series is that
# short, 1.17x at most). A smaller jump in so few values (gpt-neox's 2.28 -> 11.05 over two
# iterations, EleutherAI/gpt-neox#947; chuckcho/video-caffe#11's 3.31 -> 87.34) is no proof
# by its factor.
SHORT_JUMP_FACTOR = 100.0
# Caffe's softmax loss clamps each probability at FLT_MIN, so a sample whose true class got
# probability 0 costs -log(FLT_MIN) = 87.3365 (src/caffe/layers/softmax_loss_layer.cpp,
# https://github.com/BVLC/caffe): a printed loss of exactly that value is every sample at the
# clamp, a model whose outputs overflowed (chuckcho/video-caffe#11: 3.31, then 87.3366).
CAFFE_SATURATED_LOSS = -math.log(1.1754943508222875e-38)
CAFFE_SATURATED_TOLERANCE = 1e-3
# Non-finite grad norms printed this many times in a row at the end of the log, with a finite
# loss beside them (HF Trainer's {'loss': 0.0, 'grad_norm': nan}, AnswerDotAI/ModernBERT#233):
# the run diverged. One NaN grad norm is an fp16 overflow the scaler skips (a maintainer in
# JiaquanYe/TableMASTER-mmocr#32), so a run of them is required. A run of them beside losses
# that are all finite and above 0 is not one either: mmcv's logger prints the mean grad norm of
# each interval, NaN when one step in it overflowed and was skipped, while the loss holds
# (OpenDriveLab/Birds-eye-view-Perception#13: epoch 12, loss 4.17-4.40, grad_norm nan at every
# interval; tests/data/loss_curves).
GRAD_NORM_NAN_RUN = 3
# Megatron's training_log prints a loss only `if avg > 0.0`, which a NaN fails: its last
# iteration line without "lm loss" where earlier ones had it is a NaN loss (epfLLM/Megatron-LLM#33,
# "NaN losses after ~3300 steps" with the lm loss field gone and the skip counters at 0).
# An iteration line is told by the fields printed on both sides of the loss.
MEGATRON_LINE = ("iteration", "global batch size:", "loss scale:")
MEGATRON_LOSS = "lm loss:"
# Divergence told by the loss scaler alone: fp16 training halves the loss scale at every
# overflowing step and skips it. Below 1 the scaler has halved it at every step for a long run
# (apex prints "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to
# 9.9e-206", NVIDIA/apex#318; DeepSpeed stops at its min_loss_scale, default 1,
# https://www.deepspeed.ai/docs/config-json/#fp16-training-options, with "Current loss scale
# already at minimum", rule loss-nan-grad-norm; fairseq prints "overflow detected, setting loss
# scale to: 0.0001220703125" down to its 1e-4 floor, facebookresearch/fairseq#512).
# LOSS_SCALE_RUN reductions in a row end the log. DeepSpeed's fp16 optimizers (fused and
# unfused, deepspeed/runtime/fp16/fused_optimizer.py, _update_scale) print one overflow as
# "Grad overflow on iteration: N", "Reducing dynamic loss scale from X to Y" and "Overflow
# detected. Skipping step. Attempted loss scale: X, reducing to Y": the two reductions of one
# overflow, a line or two apart, count once. Its scaler's hysteresis line ("Attempted loss
# scale: X, but hysteresis is 2. Reducing hysteresis to 1") is an overflow that reduced
# nothing: it neither counts nor ends the run.
MIN_LOSS_SCALE = 1.0
LOSS_SCALE_RUN = 5
_LOSS_SCALE = re.compile(
    r"(?:reducing|setting) loss scale to:? ([0-9.]+(?:e[-+]?\d+)?)|Attempted loss scale: \S+, "
    r"reducing to ([0-9.]+(?:e[-+]?\d+)?)|Reducing dynamic loss scale from \S+ to "
    r"([0-9.]+(?:e[-+]?\d+)?)",
    re.I,
)
_SAME_OVERFLOW_LINES = 2
# The same in Megatron's own iteration lines (fp16): its scaler halves the scale on an
# overflowing step down to --min-loss-scale (1.0 by default) and skips the step
# (https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/optimizer/grad_scaler.py);
# every iteration of LOSS_SCALE_RUN log intervals in a row skipped at MIN_LOSS_SCALE or less
# means the run no longer trains, whether or not a NaN is printed. At start-up the scaler
# skips while it calibrates down from 2**32, above the floor.
_MEGATRON_SKIPS = re.compile(
    r"iteration\s+(\d+)/.*\bloss scale: ([0-9.]+(?:e[-+]?\d+)?) \|.*"
    r"\bnumber of skipped iterations:\s+(\d+) \|",
    re.I,
)
# The metrics records (metrics.py) read back from the end of the log at most, and the loss-scale
# values of a collapse: a scale at or below LOSS_SCALE_FLOOR printed twice without rising (the
# scaler halving it on overflow after overflow, apex's "reducing loss scale to 7.6e-06",
# fairseq's "setting loss scale to: 0.000244"), or printed as 0 (fairseq's "loss_scale 0.000":
# a scale rounded away, its progress lines print three decimals). 2**-10 is 26 halvings below
# apex's and fairseq's initial 2**16 and a few above fairseq's own floor, --min-loss-scale 1e-4
# (https://fairseq.readthedocs.io/en/latest/command_line_tools.html); a run still learning at
# 0.004 was seen (facebookresearch/fairseq#515), so the floor sits below that.
METRICS_RECORDS = 200
LOSS_SCALE_STREAK = 2
LOSS_SCALE_FLOOR = 2.0**-10
# A last record with this many non-finite model numbers (grad norm, rewards, logits: a Hugging
# Face trainer's {'loss': 0.0, 'grad_norm': nan, 'logits/chosen': nan}) is a divergence: one
# non-finite grad norm alone is an fp16 overflow the scaler skips (GRAD_NORM_NAN_RUN).
NONFINITE_RECORD_MIN = 2


_LOSS_VALUE = re.compile(r"[-+]?(nan|inf|\d*\.?\d+(?:e[-+]?\d+)?)\s*$", re.I)


# A training script's own bare table: `print(step, loss)`, `print(f"{step}\t{loss}")`, a csv
# writer's `step,loss` rows (with or without its header line), one row per logging step and no
# key on it. A row is numbers only, the first an integer: the step, strictly increasing from row
# to row. The loss column is read only where it is not in doubt: a table of two columns, or a
# header line naming exactly one loss column (`epoch,loss,accuracy`); a header naming none
# (`step,G,D`) or two (`step,train_loss,val_loss`) leaves the table unread. A script may print
# other lines between two rows (a checkpoint saved or reloaded): up to BARE_TABLE_GAP of them.
# The table must end within BARE_TABLE_AFTER lines of the log's end.
BARE_TABLE_MIN_ROWS = 4
BARE_TABLE_GAP = 8
BARE_TABLE_AFTER = 50
BARE_TABLE_MAX_COLUMNS = 8
BARE_ROW_CHARS = 256
# Non-finite values persisting: the last BARE_NONFINITE_RUN rows or more, after a finite one
# (a column that is NaN from its first row is missing data, not a loss that diverged; one NaN
# row may be a skipped step). lich99/ChatGLM-finetune-LoRA#32 prints one finite loss, then NaN
# at every step.
BARE_NONFINITE_RUN = 2
BARE_FINITE_BEFORE = 1
# A cheap test on the tail before any table is looked for: a line that starts with an integer
# followed by a separator and a number (the separator's alternatives do not overlap, so that a
# long run of blanks is read once, not once per split).
_BARE_ROW_HINT = re.compile(
    rb"(?m)^[ \t]*(?:\d+(?:[ \t]*,[ \t]*|[ \t]+)(?:[-+]?(?:\d|\.\d|nan|inf)|tensor\()|tensor\()",
    re.I,
)
# `print(loss)` of a torch scalar tensor prints its repr, `tensor(2.3026, device='cuda:0',
# grad_fn=<NllLossBackward0>)` (torch/_tensor_str.py, _str_intern: the value, then the device,
# dtype, grad_fn or requires_grad suffixes): read as the number it holds. A row of such a repr
# alone is a series whose step is its order (`print(loss)` at each step).
_TENSOR_SCALAR = re.compile(r"tensor\(\s*([-+]?[\w.]+)(?:,[^()]*)?\)")
_BARE_CELL = re.compile(
    r"[-+]?(?:nan|inf(?:inity)?|\d+(?:\.\d*)?(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?)", re.I
)
_BARE_HEADER_CELL = re.compile(r"[A-Za-z_][A-Za-z0-9_ ./-]*")
_BARE_STEP_NAMES = frozenset({"step", "steps", "iter", "iteration", "epoch", "global_step"})
# pandas prints a Series as index and value, NaN included, then its footer ("Name: x, dtype:
# float64", "Length: n, dtype: ...": pandas/io/formats/format.py, SeriesFormatter): data, not a
# training script's rows.
_PANDAS_FOOTER = ("Name:", "dtype:", "Length:", "Freq:")


def _bare_cells(line: str) -> list[str]:
    """A row's or a header's cells: cut at commas in a csv line, else at tabs, else at spaces."""
    s = line.strip()
    if "," in s:
        return [c.strip() for c in s.split(",")]
    if "\t" in s:
        return [c.strip() for c in s.split("\t")]
    return s.split()


def _bare_row(line: str) -> list[float] | None:
    """A bare table's row (step first, then the values; a scalar tensor's repr alone is its
    value alone), or None."""
    s = line.strip()
    if not s or len(s) > BARE_ROW_CHARS:
        return None
    if "tensor(" in s:
        s = _TENSOR_SCALAR.sub(r"\1", s)
        if _BARE_CELL.fullmatch(s) and s != line.strip():
            return [float(s)]
    if not s[0].isdigit():
        return None
    cells = _bare_cells(s)
    if not 2 <= len(cells) <= BARE_TABLE_MAX_COLUMNS or not cells[0].isdigit():
        return None
    if not all(_BARE_CELL.fullmatch(c) for c in cells[1:]):
        return None
    return [float(c) for c in cells]


def _bare_loss_column(header: str, columns: int) -> int | None:
    """The loss column of a bare table: the only loss its header names, the second of two
    columns without a header, else None."""
    cells = _bare_cells(header)
    if len(cells) == columns and cells[0] == "":
        cells[0] = "index"  # pandas' to_csv leaves the index column unnamed
    names = [metrics.normalised(c) for c in cells]
    # A line of words before the rows is their header if it is cut like a csv (commas, tabs)
    # or names a step or a loss: a line of prose just before the rows is not one.
    is_header = ("," in header or "\t" in header.strip()) or any(
        n in _BARE_STEP_NAMES or metrics.is_loss_key(n) for n in names
    )
    if is_header and len(cells) == columns and all(_BARE_HEADER_CELL.fullmatch(c) for c in cells):
        named = [i for i, n in enumerate(names) if metrics.is_loss_key(n)]
        return named[0] if len(named) == 1 and (named[0] > 0 or columns == 1) else None
    return {1: 0, 2: 1}.get(columns)


def _bare_table(lines: list[str], lowest: int) -> list[tuple[int, float]] | None:
    """(index, loss) of the rows of the bare table that ends the log, in order, or None."""
    rows: list[tuple[int, list[float]]] = []
    gap = 0
    for i in range(len(lines) - 1, lowest - 1, -1):
        row = _bare_row(lines[i]) if lines[i][:1].isdigit() or lines[i][:1] in " \tt" else None
        if row is None:
            if not rows and len(lines) - 1 - i >= BARE_TABLE_AFTER:
                return None
            if rows:
                gap += 1
                if gap > BARE_TABLE_GAP:
                    break
            elif lines[i].lstrip().startswith(_PANDAS_FOOTER):
                return None
            continue
        if rows and (len(row) != len(rows[-1][1]) or (len(row) > 1 and row[0] >= rows[-1][1][0])):
            break
        rows.append((i, row))
        gap = 0
        if len(rows) >= METRICS_RECORDS:
            break
    if len(rows) < BARE_TABLE_MIN_ROWS:
        return None
    rows.reverse()
    first = rows[0][0]
    header = lines[first - 1] if first > lowest else ""
    column = _bare_loss_column(header, len(rows[0][1]))
    if column is None:
        return None
    return [(i, row[column]) for i, row in rows]


def _bare_table_verdict(lines: list[str], lowest: int) -> tuple[int, str, bool] | None:
    """(index, detail, non-finite) where the loss column of a bare table at the end of the log
    diverged: non-finite over its last rows, or a spike with no recovery after a loss that fell
    (a column that rises, an accuracy or a memory, is no loss); else None."""
    table = _bare_table(lines, lowest)
    if table is None:
        return None
    values = [v for _, v in table]
    run = 0
    while run < len(values) and not math.isfinite(values[-1 - run]):
        run += 1
    if run:
        if run < BARE_NONFINITE_RUN or len(values) - run < BARE_FINITE_BEFORE:
            return None
        i = table[-run][0]
        return i, f"loss {values[-run]} in the last {run} rows of a bare step/loss table", True
    if min(values) < 0:
        return None  # a signed series (a GAN's losses, an ELBO) is not read as a loss curve
    before = values[:-LOSS_SPIKE_STEPS]
    half = len(before) // 2
    if half < 1 or _median(before[:half]) <= _median(before[half:]):
        return None  # the values before did not fall: not read as a loss
    exploded = loss_exploded(values)
    base = exploded[0] if exploded is not None else loss_diverged(values)
    if base is None:
        return None
    steps = exploded[1] if exploded is not None else LOSS_SPIKE_STEPS
    i = table[-steps][0]
    return (
        i,
        f"loss diverged in a bare step/loss table: {values[-steps]:g} and the {steps - 1} "
        f"value(s) after it over {LOSS_SPIKE_FACTOR:g}x the {base:g} before",
        False,
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# A loss printed under a suffixed key only ("loss_net: nan", "loss_cls: 0.53"), where no plain
# "loss" key is on the line: the first such key's value. The loss scale is the scaler's, not a
# loss ("loss_scale: 32768").
_SUFFIXED_LOSS = re.compile(
    r"\bloss_(?!scale)[a-z_]+['\"]?\s{0,8}[:=]\s{0,8}['\"]?"
    r"([-+]?(?:nan|inf|\d*\.?\d+(?:e[-+]?\d+)?))(?![\w.])",
    re.I,
)


def loss_value(cat: Catalogue, line: str) -> float | None:
    """The loss a line prints (the catalogue's loss-curve rule, else a suffixed loss key), or
    None."""
    m = cat.loss.regex.search(line)
    vm = _LOSS_VALUE.search(m.group(0)) if m else None
    if vm:
        return float(vm.group(0))
    low = line.lower()
    sm = _SUFFIXED_LOSS.search(line) if "loss_" in low else None
    if sm:
        return float(sm.group(1))
    if "loss/" in low:
        # A loss under a path key (composer's "loss/train/total: 2.45"), read as a record.
        for key, value in metrics.record(line).items():
            if metrics.is_loss_key(key):
                return value
    return None


def _losses_hold(cat: Catalogue, grads: list[tuple[int, float, str]]) -> bool:
    """Whether every line of a run of non-finite grad norms prints a loss, finite and above 0:
    the scaler skipping an overflowing step inside each logged interval, not a divergence."""
    for _, _, line in grads:
        v = loss_value(cat, line)
        if v is None or not math.isfinite(v) or v <= 0:
            return False
    return True


def loss_saturated(values: list[float]) -> bool:
    """Whether the last printed loss is Caffe's clamp, -log(FLT_MIN): every sample's true class
    at probability 0."""
    return bool(values) and abs(values[-1] - CAFFE_SATURATED_LOSS) < CAFFE_SATURATED_TOLERANCE


def loss_exploded(values: list[float]) -> tuple[float, int, float] | None:
    """An explosion, however few values were printed: (the lowest value before, how many last
    values, the factor they all exceed it by), or None."""
    for steps, factor, before in (
        (LOSS_EXPLODE_STEPS, LOSS_EXPLODE_FACTOR, 1),
        (1, LOSS_JUMP_FACTOR, LOSS_JUMP_BEFORE),
    ):
        if len(values) >= steps + before:
            base = min(values[:-steps])
            if base > 0 and min(values[-steps:]) > factor * base:
                return base, steps, factor
    if 2 <= len(values) < LOSS_SPIKE_STEPS + LOSS_BASELINE_MIN:
        base = min(values[:-1])
        if base > 0 and values[-1] > SHORT_JUMP_FACTOR * base:
            return base, 1, SHORT_JUMP_FACTOR
    return None


def loss_diverged(values: list[float]) -> float | None:
    """The baseline the last LOSS_SPIKE_STEPS values all exceed LOSS_SPIKE_FACTOR times (a
    spike with no recovery, or a divergence), or None. `values` are the finite losses in the
    order printed; at least LOSS_BASELINE_MIN values must come before the last ones."""
    exploded = loss_exploded(values)
    if exploded is not None:
        return exploded[0]
    if len(values) < LOSS_SPIKE_STEPS + LOSS_BASELINE_MIN:
        return None
    before = sorted(values[-LOSS_SPIKE_STEPS - LOSS_BASELINE_STEPS : -LOSS_SPIKE_STEPS])
    at = (len(before) - 1) * LOSS_BASELINE_QUANTILE
    lo = math.floor(at)
    base = before[lo] + (before[min(lo + 1, len(before) - 1)] - before[lo]) * (at - lo)
    if base > 0 and min(values[-LOSS_SPIKE_STEPS:]) > LOSS_SPIKE_FACTOR * base:
        return base
    return None


def _nonfinite_event(
    cat: Catalogue, file_index: int, name: str, line_no: int, line: str, detail: str
) -> Event:
    """A loss_nan event the numbers decided beyond doubt (a collapsed scaler, a non-finite
    record): the loss rule's, at the confidence of a non-finite loss."""
    parsed = parse_line(line)
    return Event(
        file_index=file_index,
        file=name,
        line_no=line_no,
        text=line.strip()[:EVIDENCE_TEXT_CHARS],
        rule=cat.loss,
        cause="loss_nan",
        tier=cat.loss.tier,
        kind="cause",
        confidence=max(cat.loss.confidence, NONFINITE_LOSS_CONFIDENCE),
        detail=detail,
        host=parsed.host,
        rank=parsed.rank,
        stamp=parsed.stamp,
    )


def _loss_events(cat: Catalogue, tails: list[tuple[int, str, int, bytes]]) -> list[Event]:
    """loss_nan from the loss curve at the end of each file: NaN/inf last, or a spike."""
    events = []
    grad = re.compile(
        r"grad[_ ]norm['\"]?: ?['\"]?([-+]?(?:nan|inf|\d*\.?\d+(?:e[-+]?\d+)?))", re.I
    )
    for file_index, name, last_line, tail in tails:
        low = tail.lower()
        keyed = b"loss" in low or b"skipped=" in low
        if not keyed and not _BARE_ROW_HINT.search(tail):
            continue
        lines = tail.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        first = last_line - len(lines) + 1
        # The first tail line may be cut, unless the tail is the whole file.
        lowest = 0 if first == 1 else 1
        if not keyed:
            bare = _bare_table_verdict(lines, lowest)
            if bare is not None:
                events.append(_bare_event(cat, file_index, name, first, lines, bare))
            continue
        lines = _join_wrapped_records(lines)
        # The checks below read at most the last LOSS_SPIKE_STEPS + LOSS_BASELINE_STEPS values
        # and the run of non-finite ones at the end: read the lines backwards until both are
        # known (the first tail line may be cut, so it never counts).
        series: list[tuple[int, float, str]] = []
        finite = False
        for i in range(len(lines) - 1, lowest - 1, -1):
            v = loss_value(cat, lines[i]) if "loss" in lines[i].lower() else None
            if v is not None:
                series.append((first + i, v, lines[i]))
                finite = finite or math.isfinite(series[-1][1])
                if finite and len(series) >= LOSS_SPIKE_STEPS + LOSS_BASELINE_STEPS:
                    break
        series.reverse()
        collapse = _loss_scale_collapse(lines, lowest) or _loss_scale_stuck(lines, lowest)
        skipped = _megatron_all_skipped(lines, lowest) if collapse is None else None
        if skipped is not None:
            collapse = skipped
        if collapse is not None:
            # Every step overflowing: the scaler halved the loss scale below its floor, or
            # skips every step at its floor.
            i, scale = collapse
            events.append(
                _nonfinite_event(
                    cat, file_index, name, first + i, lines[i],
                    f"every iteration skipped at loss scale {scale:g}: every step overflows"
                    if skipped is not None
                    else f"loss scale fell to {scale:g}: every step overflows",
                )
            )  # fmt: skip
            continue
        verdict = _metrics_verdict(lines, lowest)
        if verdict is not None:
            i, detail = verdict
            events.append(_nonfinite_event(cat, file_index, name, first + i, lines[i], detail))
            continue
        hidden = _megatron_hidden_loss(lines, lowest)
        if not series and hidden is None:
            # No keyed loss: a bare table's rows may still be the loss (`step,loss` csv).
            bare = _bare_table_verdict(lines, lowest)
            if bare is not None:
                events.append(_bare_event(cat, file_index, name, first, lines, bare))
            continue
        grads: list[tuple[int, float, str]] = []
        for i in range(len(lines) - 1, lowest - 1, -1):
            gm = grad.search(lines[i]) if "norm" in lines[i] else None
            if gm:
                grads.append((first + i, float(gm.group(1)), lines[i]))
                if len(grads) >= GRAD_NORM_NAN_RUN:
                    break
        run = 0
        while run < len(series) and not math.isfinite(series[-1 - run][1]):
            run += 1
        hit, detail, conf = None, None, cat.loss.confidence
        if run:
            hit = series[-run]
            detail = f"loss {hit[1]} at the end of the log"
            conf = max(conf, NONFINITE_LOSS_CONFIDENCE)
        elif hidden is not None:
            hit = (first + hidden, math.nan, lines[hidden])
            detail = "Megatron printed no lm loss at its last iteration (a NaN loss is not printed)"
            conf = max(conf, NONFINITE_LOSS_CONFIDENCE)
        elif (
            len(grads) >= GRAD_NORM_NAN_RUN
            and not any(math.isfinite(v) for _, v, _ in grads)
            and not _losses_hold(cat, grads)
        ):
            hit = grads[-1]
            detail = f"grad norm {hit[1]} in the last {len(grads)} steps of the log"
            conf = max(conf, NONFINITE_LOSS_CONFIDENCE)
        else:
            finite = [(i, v, t) for i, v, t in series if math.isfinite(v)]
            exploded = loss_exploded([v for _, v, _ in finite])
            base = loss_diverged([v for _, v, _ in finite])
            if exploded is not None:
                base, steps, factor = exploded
                hit = finite[-steps]
                detail = (
                    f"loss exploded: {hit[1]:g}"
                    + (f" and the {steps - 1} value(s) after it" if steps > 1 else "")
                    + f" over {factor:g}x the {base:g} before"
                )
            elif base is not None:
                hit = series[-LOSS_SPIKE_STEPS]
                detail = (
                    f"loss diverged: {hit[1]:g} and the {LOSS_SPIKE_STEPS - 1} values after it "
                    f"over {LOSS_SPIKE_FACTOR:g}x the {base:g} before"
                )
            elif loss_saturated([v for _, v, _ in finite]):
                hit = finite[-1]
                detail = (
                    f"loss {hit[1]:g} is Caffe's softmax loss at its clamp, -log(FLT_MIN): "
                    "every sample's true class at probability 0"
                )
        if hit:
            parsed = parse_line(hit[2])
            events.append(
                Event(
                    file_index=file_index,
                    file=name,
                    line_no=hit[0],
                    text=hit[2].strip()[:EVIDENCE_TEXT_CHARS],
                    rule=cat.loss,
                    cause="loss_nan",
                    tier=cat.loss.tier,
                    kind="cause",
                    confidence=conf,
                    detail=detail,
                    host=parsed.host,
                    rank=parsed.rank,
                    stamp=parsed.stamp,
                )
            )
    return events


def _bare_event(
    cat: Catalogue,
    file_index: int,
    name: str,
    first: int,
    lines: list[str],
    verdict: tuple[int, str, bool],
) -> Event:
    """The loss_nan event of a bare table's verdict: as sure as a keyed loss curve's."""
    i, detail, nonfinite = verdict
    event = _nonfinite_event(cat, file_index, name, first + i, lines[i], detail)
    if not nonfinite:
        event.confidence = cat.loss.confidence
    return event


_COMPOSER_HEAD = re.compile(r"\[(?:epoch|batch|sample|token)=[0-9/]+\](?:\[[a-z]+=[0-9/]+\])*:\s*$")


def _join_wrapped_records(lines: list[str]) -> list[str]:
    """The lines with each metrics record printed over several lines joined on its first line
    (the others left empty, so that line numbers stay): a line ending with the fields'
    separator "|" goes on in the next line, unless that line starts a record of its own (the
    first word of the record it would continue: Megatron's "iteration")."""
    out = lines
    i = 0
    while i < len(lines) - 1:
        if _COMPOSER_HEAD.match(lines[i]):
            # composer's ConsoleLogger: "[epoch=1][batch=16/16]:" then one "\t Train name: v"
            # line per metric (composer/loggers/console_logger.py); joined as "|" fields.
            j = i
            while j + 1 < len(lines) and lines[j + 1][:1] in ("\t", " ") and lines[j + 1].strip():
                j += 1
            if j > i:
                out = _joined(out, lines, i, j, " | ")
            i = j + 1
            continue
        if not lines[i].rstrip().endswith("|"):
            i += 1
            continue
        head = lines[i].split(None, 1)[0] if lines[i].strip() else ""
        j = i
        while (
            j + 1 < len(lines)
            and lines[j].rstrip().endswith("|")
            and lines[j + 1].strip()
            and lines[j + 1].split(None, 1)[0] != head
            and metrics.record(lines[j + 1])
        ):
            j += 1
        if j > i:
            out = _joined(out, lines, i, j, " ")
        i = j + 1
    return out


def _joined(out: list[str], lines: list[str], i: int, j: int, sep: str) -> list[str]:
    """`out` (copied from `lines` the first time) with lines i..j joined on line i by `sep` and
    the others emptied."""
    out = out if out is not lines else list(lines)
    out[i] = sep.join(line.strip() for line in lines[i : j + 1])
    for k in range(i + 1, j + 1):
        out[k] = ""
    return out


def _metrics_verdict(lines: list[str], lowest: int) -> tuple[int, str] | None:
    """(index, detail) where the metrics records at the end of the log (metrics.record: any
    trainer's format) say the run diverged: the loss scale collapsed, or the last record holds
    non-finite model numbers or NaN iterations; else None."""
    scales: list[tuple[int, float]] = []
    last: tuple[int, dict[str, float]] | None = None
    read = 0
    for i in range(len(lines) - 1, lowest - 1, -1):
        rec = metrics.record(lines[i])
        if not rec:
            continue
        read += 1
        if "loss_scale" in rec and len(scales) < LOSS_SCALE_STREAK:
            scales.append((i, rec["loss_scale"]))
        if last is None and len(rec) >= 2:
            last = (i, rec)
        if read >= METRICS_RECORDS or (last is not None and len(scales) >= LOSS_SCALE_STREAK):
            break
    if scales:
        i, scale = scales[0]
        if scale <= 0:
            return i, f"loss scale fell to {scale:g}: every step overflows"
        if (
            len(scales) >= LOSS_SCALE_STREAK
            and scale <= LOSS_SCALE_FLOOR
            and all(a <= b for (_, a), (_, b) in itertools.pairwise(scales))
        ):
            return i, f"loss scale fell to {scale:g}: every step overflows"
    if last is not None:
        i, rec = last
        bad = metrics.nonfinite_model_values(rec)
        if any(metrics.is_loss_key(k) for k in bad) or len(bad) >= NONFINITE_RECORD_MIN:
            return i, "non-finite " + ", ".join(bad[:4]) + " in the last metrics of the log"
        if rec.get("loss") == 0 and any(k in metrics.GRAD_NORM_KEYS for k in bad):
            # A trainer that zeroes a NaN loss (Hugging Face's logged {'loss': 0.0,
            # 'grad_norm': nan}): a loss of exactly 0 beside a non-finite grad norm.
            return i, "loss 0.0 with a non-finite grad norm in the last metrics of the log"
        if rec.get(metrics.NAN_ITERS_KEY, 0) > 0:
            return i, f"{rec[metrics.NAN_ITERS_KEY]:g} NaN iteration(s) in the last log interval"
    steps = _every_step_skipped(lines, lowest)
    if steps is not None:
        return steps
    return None


def _every_step_skipped(lines: list[str], lowest: int) -> tuple[int, str] | None:
    """DeepSpeed's "step=N, skipped=M" progress records: (index, detail) if between the last
    two every step was skipped (the scaler overflowing at every step; DeepSpeed's engine counts
    them, deepspeed/runtime/engine.py), else None. At start-up a few steps are skipped while
    the scale calibrates, then the count stops growing."""
    found: list[tuple[int, float, float]] = []
    for i in range(len(lines) - 1, lowest - 1, -1):
        if "skipped=" not in lines[i]:
            continue
        rec = metrics.record(lines[i])
        if "step" in rec and "skipped" in rec:
            found.append((i, rec["step"], rec["skipped"]))
            if len(found) == 2:
                break
    if len(found) < 2:
        return None
    (i, step, skipped), (_, step0, skipped0) = found
    if step > step0 and skipped - skipped0 == step - step0:
        return i, f"every step skipped from step {step0:g} to {step:g}: every step overflows"
    return None


def _loss_scale_collapse(lines: list[str], lowest: int) -> tuple[int, float] | None:
    """(index, scale) of the last loss-scale reduction of the log if it went below
    MIN_LOSS_SCALE and the last LOSS_SCALE_RUN reductions all overflowed in a row."""
    found: list[tuple[int, float]] = []
    for i in range(len(lines) - 1, lowest - 1, -1):
        if "scale" not in lines[i]:
            continue
        m = _LOSS_SCALE.search(lines[i])
        if m is None:
            if "but hysteresis is" in lines[i] or "Grad overflow on iteration" in lines[i]:
                continue  # an overflow's report that reduces nothing (logged from _update_scale)
            break  # the run of reductions at the end of the log ended
        try:
            scale = float(next(g for g in m.groups() if g))
        except ValueError:
            break
        if (
            m.group(3)
            and found
            and found[-1][1] == scale
            and found[-1][0] - i <= _SAME_OVERFLOW_LINES
        ):
            continue  # the same overflow's "Attempted ..., reducing to" report, just after
        found.append((i, scale))
        if len(found) >= LOSS_SCALE_RUN:
            break
    # At the floor counts: DeepSpeed's scaler stops at its min_loss_scale and reports "Attempted
    # loss scale: 1, reducing to 1" at every overflow from then on (deepspeedai/DeepSpeed#1593).
    if len(found) < LOSS_SCALE_RUN:
        return None
    if found[0][1] <= MIN_LOSS_SCALE:
        return found[0]
    # One halving above the floor, reached by halving at every overflow in a row (each scale
    # half the one before it: nothing in between let the scaler grow it): the next overflow
    # stops the run at the floor (ymcui/Chinese-LLaMA-Alpaca#534, 64 -> 32 -> ... -> 2 over five
    # steps, then DeepSpeed's "Current loss scale already at minimum").
    if found[0][1] <= 2 * MIN_LOSS_SCALE and all(
        b == 2 * a for (_, a), (_, b) in itertools.pairwise(found)
    ):
        return found[0]
    return None


_SCALE_ATTEMPT = re.compile(r"Attempted loss scale: ([0-9.e+-]+), reducing to ([0-9.e+-]+)")


def _loss_scale_stuck(lines: list[str], lowest: int) -> tuple[int, float] | None:
    """(index, scale) if DeepSpeed's last LOSS_SCALE_STREAK overflow reports could not reduce
    the scale ("Attempted loss scale: 1, reducing to 1": at its min_loss_scale and still
    overflowing, deepspeed/runtime/fp16/loss_scaler.py), else None."""
    found: list[tuple[int, float]] = []
    for i in range(len(lines) - 1, lowest - 1, -1):
        if "Attempted loss scale" not in lines[i]:
            continue
        m = _SCALE_ATTEMPT.search(lines[i])
        if m is None:
            continue
        try:
            attempted, reduced = float(m.group(1)), float(m.group(2))
        except ValueError:
            return None
        if attempted != reduced:
            return None
        found.append((i, reduced))
        if len(found) == LOSS_SCALE_STREAK:
            return found[0]
    return None


def _megatron_all_skipped(lines: list[str], lowest: int) -> tuple[int, float] | None:
    """(index, scale) of the last Megatron iteration line if the last LOSS_SCALE_RUN log
    intervals skipped every iteration at a loss scale of MIN_LOSS_SCALE or less."""
    found: list[tuple[int, int, float, int]] = []  # (index, iteration, scale, skipped)
    for i in range(len(lines) - 1, lowest - 1, -1):
        if "skipped iterations" not in lines[i]:
            continue
        m = _MEGATRON_SKIPS.search(lines[i])
        if m is None:
            continue
        found.append((i, int(m.group(1)), float(m.group(2)), int(m.group(3))))
        if len(found) > LOSS_SCALE_RUN:
            break
    if len(found) <= LOSS_SCALE_RUN:
        return None
    for (_, it, scale, skipped), (_, prev, _, _) in itertools.pairwise(found):
        if scale > MIN_LOSS_SCALE or skipped == 0 or skipped != it - prev:
            return None
    return found[0][0], found[0][2]


def _megatron_hidden_loss(lines: list[str], lowest: int) -> int | None:
    """Index of the last Megatron iteration line if it skipped no iteration and prints no loss
    at all (Megatron prints each loss whose average is above 0, and a training loss is: a NaN
    is what fails), or no lm loss where an earlier one had."""
    last = None
    for i in range(len(lines) - 1, lowest - 1, -1):
        if all(f in lines[i] for f in MEGATRON_LINE):
            if last is None:
                if MEGATRON_LOSS in lines[i]:
                    return None
                rec = metrics.record(lines[i])
                # A skipped iteration adds no loss (the scaler calibrating at start-up).
                if rec.get(metrics.SKIPPED_KEY) == 0 and not any(map(metrics.is_loss_key, rec)):
                    return i
                last = i
            elif MEGATRON_LOSS in lines[i]:
                return last
    return None
