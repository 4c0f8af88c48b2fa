"""Runtime estimates per dataset and phase: the default table for a first run, and learning
from past runs. Plain functions over plain data (no Django), used by the planner's callers.

The anchor is the paper's HumanEval profile (docs/acme-workload.md §6) for a 7B model in
the coupled setting: loading (with preprocessing) "over 1 min", 29.5% of the evaluation's
time; metric computation the last 42 s, 19.0%; the rest (51.5%) inference. So one trial is
42 / 0.19 = 221 s: load 65.2 s, inference 113.8 s, metrics 42 s.

Other datasets scale from that anchor by their size and kind (what the model assumes):
- inference time is proportional to the number of samples; a generation sample (free text,
  chain of thought, code) costs what a HumanEval problem costs (113.8 s / 164 = 0.69 s); a
  multiple-choice sample scored by per-option likelihood costs a tenth of that, since it is
  one batched prefill of a few hundred tokens per option instead of hundreds of decode steps;
- code metrics run every program: HumanEval's 42 s / 164 = 0.26 s per sample; judged chat
  metrics take up to 30 min (§6) for the largest judged set (AlpacaEval's 805): 2.2 s per
  sample; string-matching metrics cost 5 ms a sample, at least 2 s (a CPU job's start).
- the load is the model's, not the dataset's: the same for every trial of one checkpoint.
Those rates only weigh the datasets against each other: the table is then scaled so that the
whole 63-dataset suite has the paper's phase shares (`DEFAULT_TABLE`).

Learned estimates replace the table: each finished run records per dataset the measured
seconds per phase, and `estimates_learn` blends them in (an exponential moving average, so
one odd run does not swing the plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# HumanEval profile (docs/acme-workload.md §6).
HUMANEVAL_SAMPLES = 164
HUMANEVAL_METRICS_S = 42.0
HUMANEVAL_METRICS_SHARE = 0.19
HUMANEVAL_LOAD_SHARE = 0.295
HUMANEVAL_TRIAL_S = HUMANEVAL_METRICS_S / HUMANEVAL_METRICS_SHARE  # 221 s
HUMANEVAL_LOAD_S = HUMANEVAL_LOAD_SHARE * HUMANEVAL_TRIAL_S  # 65.2 s
HUMANEVAL_INFER_S = HUMANEVAL_TRIAL_S - HUMANEVAL_LOAD_S - HUMANEVAL_METRICS_S  # 113.8 s

GEN_S_PER_SAMPLE = HUMANEVAL_INFER_S / HUMANEVAL_SAMPLES
# A likelihood-scored sample: one prefill instead of ~hundreds of decode steps (see above).
CHOICE_S_PER_SAMPLE = GEN_S_PER_SAMPLE / 10
CODE_METRICS_S_PER_SAMPLE = HUMANEVAL_METRICS_S / HUMANEVAL_SAMPLES
# GPT-4-judged metrics: up to 30 min (§6) for AlpacaEval's 805 instructions.
JUDGE_METRICS_S_PER_SAMPLE = 1800.0 / 805
MATCH_METRICS_S_PER_SAMPLE = 0.005
MIN_METRICS_S = 2.0

KINDS = ("choice", "gen", "code", "judge")

# A 63-dataset suite like the paper's (OpenCompass-style base-model evaluation): name, samples
# in the split that is evaluated (the datasets' published test or validation sizes), kind.
DEFAULT_SUITE: tuple[tuple[str, int, str], ...] = (
    # Multiple choice, scored by likelihood.
    ("mmlu", 14042, "choice"),
    ("cmmlu", 11582, "choice"),
    ("ceval", 1346, "choice"),
    ("agieval", 8062, "choice"),
    ("arc_c", 1172, "choice"),
    ("arc_e", 2376, "choice"),
    ("hellaswag", 10042, "choice"),
    ("piqa", 1838, "choice"),
    ("siqa", 1954, "choice"),
    ("winogrande", 1267, "choice"),
    ("openbookqa", 500, "choice"),
    ("commonsense_qa", 1221, "choice"),
    ("boolq", 3270, "choice"),
    ("race_high", 3498, "choice"),
    ("race_middle", 1436, "choice"),
    ("copa", 100, "choice"),
    ("cb", 56, "choice"),
    ("rte", 277, "choice"),
    ("wic", 638, "choice"),
    ("wsc", 104, "choice"),
    ("multirc", 4848, "choice"),
    ("record", 10000, "choice"),
    ("ax_b", 1104, "choice"),
    ("ax_g", 356, "choice"),
    ("story_cloze", 1871, "choice"),
    ("afqmc", 4316, "choice"),
    ("ocnli", 2950, "choice"),
    ("cmnli", 12241, "choice"),
    ("c3", 3816, "choice"),
    ("chid", 2002, "choice"),
    ("csl", 3000, "choice"),
    ("tnews", 10000, "choice"),
    ("iflytek", 2599, "choice"),
    ("cluewsc", 304, "choice"),
    ("eprstmt", 610, "choice"),
    ("bustm", 976, "choice"),
    ("ocnli_fc", 2520, "choice"),
    ("lambada", 5153, "choice"),
    ("truthfulqa", 817, "choice"),
    ("mathqa", 2985, "choice"),
    ("logiqa", 651, "choice"),
    ("sciq", 1000, "choice"),
    # Free-form generation, scored by string match.
    ("gsm8k", 1319, "gen"),
    ("math", 5000, "gen"),
    ("triviaqa", 8837, "gen"),
    ("nq", 3610, "gen"),
    ("bbh", 6511, "gen"),
    ("drop", 9536, "gen"),
    ("squad2", 11873, "gen"),
    ("theoremqa", 800, "gen"),
    ("strategyqa", 2290, "gen"),
    ("xsum", 11334, "gen"),
    ("cmrc", 3219, "gen"),
    ("drcd", 3524, "gen"),
    ("flores_en_zh", 1012, "gen"),
    ("tydiqa", 5077, "gen"),
    ("summedits", 2688, "gen"),
    # Code, scored by running the programs.
    ("humaneval", 164, "code"),
    ("mbpp", 500, "code"),
    ("ds1000", 1000, "code"),
    # Chat, judged by GPT-4.
    ("alpaca_eval", 805, "judge"),
    ("mt_bench", 160, "judge"),
    ("alignbench", 683, "judge"),
)


@dataclass(frozen=True)
class Estimate:
    """Seconds per phase of one dataset's coupled trial on one GPU, and where they came from."""

    dataset: str
    load_s: float
    infer_s: float
    metrics_s: float
    source: str = "default"  # "default" (the table), "learned" (past runs), "given"

    @property
    def total_s(self) -> float:
        return self.load_s + self.infer_s + self.metrics_s


def size_estimate(name: str, samples: int, kind: str) -> Estimate:
    """A dataset's estimate from its size and kind at the HumanEval anchor's rates."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} of dataset {name!r} is not one of {', '.join(KINDS)}")
    rate = CHOICE_S_PER_SAMPLE if kind == "choice" else GEN_S_PER_SAMPLE
    per_metric = {
        "code": CODE_METRICS_S_PER_SAMPLE,
        "judge": JUDGE_METRICS_S_PER_SAMPLE,
    }.get(kind, MATCH_METRICS_S_PER_SAMPLE)
    return Estimate(
        dataset=name,
        load_s=HUMANEVAL_LOAD_S,
        infer_s=samples * rate,
        metrics_s=max(MIN_METRICS_S, samples * per_metric),
    )


def default_suite(n: int = len(DEFAULT_SUITE)) -> list[Estimate]:
    """The first n datasets of the default suite (n up to its 63), each with its estimate."""
    if not 1 <= n <= len(DEFAULT_SUITE):
        raise ValueError(f"datasets: {n} is not between 1 and {len(DEFAULT_SUITE)}")
    return [DEFAULT_TABLE[name] for name, _, _ in DEFAULT_SUITE[:n]]


def default_estimate(name: str) -> Estimate:
    """The table's estimate of a dataset; one not in it is taken as HumanEval-like."""
    found = DEFAULT_TABLE.get(name)
    if found is not None:
        return found
    return Estimate(name, HUMANEVAL_LOAD_S, HUMANEVAL_INFER_S, HUMANEVAL_METRICS_S)


def with_shares(
    estimates: Sequence[Estimate], load_share: float, metrics_share: float
) -> list[Estimate]:
    """The same datasets, rescaled so that over the whole suite loading takes `load_share` and
    metrics `metrics_share` of the coupled GPU time (the paper's 29.5% / 19%), keeping the
    per-trial load and each dataset's relative inference and metric times."""
    if not 0 <= load_share < 1 or not 0 <= metrics_share < 1 or load_share + metrics_share >= 1:
        raise ValueError("shares: load and metrics must be fractions that sum below 1")
    load = sum(e.load_s for e in estimates)
    total = load / load_share
    infer_k = (1 - load_share - metrics_share) * total / sum(e.infer_s for e in estimates)
    metrics_k = metrics_share * total / sum(e.metrics_s for e in estimates)
    return [
        Estimate(e.dataset, e.load_s, e.infer_s * infer_k, e.metrics_s * metrics_k, e.source)
        for e in estimates
    ]


# The default table: sizes and kinds give each dataset's share of the suite's inference and
# metric time; the suite as a whole has the paper's phase shares (loading 29.5%, metrics 19%
# of its coupled GPU time, §6). Over 63 datasets that makes the mean inference 113.8 s,
# HumanEval's own: the two anchors agree.
DEFAULT_TABLE: dict[str, Estimate] = {
    e.dataset: e
    for e in with_shares(
        [size_estimate(*row) for row in DEFAULT_SUITE],
        HUMANEVAL_LOAD_SHARE,
        HUMANEVAL_METRICS_SHARE,
    )
}

# Weight of a new measurement against what was known (an exponential moving average).
LEARN_WEIGHT = 0.5


def estimates_learn(
    known: Mapping[str, Estimate], measured: Iterable[Estimate]
) -> dict[str, Estimate]:
    """Known estimates updated with measured ones (per dataset: the moving average)."""
    out = dict(known)
    for m in measured:
        old = out.get(m.dataset)
        if old is None or old.source == "default":
            out[m.dataset] = Estimate(m.dataset, m.load_s, m.infer_s, m.metrics_s, "learned")
            continue
        w = LEARN_WEIGHT
        out[m.dataset] = Estimate(
            m.dataset,
            (1 - w) * old.load_s + w * m.load_s,
            (1 - w) * old.infer_s + w * m.infer_s,
            (1 - w) * old.metrics_s + w * m.metrics_s,
            "learned",
        )
    return out


def estimates_parse(text: str) -> list[Estimate]:
    """Datasets from a file: one name a line (the table's estimates), or CSV with a header
    `dataset,infer_s,metrics_s[,load_s]` (seconds; load_s defaults to the table's). Blank
    lines and `#` comments are skipped. A bad line raises ValueError naming it."""
    import csv
    import io

    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError("datasets: the file names none")
    head = [c.strip() for c in lines[0].split(",")]
    if head[0] != "dataset" or len(head) == 1:
        out = []
        for n, line in enumerate(lines, 1):
            name = line.strip()
            if name == "dataset":
                continue
            if "," in name:
                raise ValueError(f"datasets line {n}: {name!r}: a CSV needs a header row")
            out.append(default_estimate(name))
        return out
    missing = {"dataset", "infer_s", "metrics_s"} - set(head)
    if missing:
        raise ValueError(f"datasets header: missing {', '.join(sorted(missing))}")
    out = []
    for n, row in enumerate(csv.DictReader(io.StringIO("\n".join(lines))), 2):
        name = (row.get("dataset") or "").strip()
        if not name:
            raise ValueError(f"datasets line {n}: no dataset name")
        try:
            values = {k: float(row[k]) for k in ("infer_s", "metrics_s", "load_s") if row.get(k)}
        except ValueError as exc:
            raise ValueError(f"datasets line {n} ({name}): not a number: {exc}") from None
        if any(v < 0 or v != v or v == float("inf") for v in values.values()):
            raise ValueError(f"datasets line {n} ({name}): seconds must be finite and >= 0")
        if "infer_s" not in values or "metrics_s" not in values:
            raise ValueError(f"datasets line {n} ({name}): infer_s and metrics_s are required")
        load = values.get("load_s", default_estimate(name).load_s)
        out.append(Estimate(name, load, values["infer_s"], values["metrics_s"], "given"))
    return out
