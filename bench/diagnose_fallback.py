"""Would an offline classifier for what the rules leave `unknown` help? Measured, not shipped.

    .venv/bin/python bench/diagnose_fallback.py

Trains a multinomial naive Bayes over the words of each log (lowercased runs of letters, digits
removed: paths, pids and times are noise) on the development corpora (tests/data/real_logs and
the synthetic tests/data/failure_logs), then reads every held-out batch
(HELDOUT below, by name) as a fallback: only the logs the rules leave `unknown` get the
classifier's cause. Twice: trained on the development corpora alone, and leave-one-batch-out
(the development corpora and every other held-out batch). Last line: JSON per mode and batch
with the logs, the rules' right causes, their unknowns, the right causes with the fallback, the
unknowns it turned right and wrong, and the classifier's right causes alone on the whole batch;
and how many logs with no failure in them (the synthetic healthy logs, the healthy loss curves)
the fallback would give a cause. Not a test.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webapp.failures.diagnosis import diagnose_paths  # noqa: E402

DATA = ROOT / "tests" / "data"
DEVELOPMENT = (DATA / "real_logs", DATA / "failure_logs")
# The held-out batches by name: a batch being gathered is never read before its first contact
# is measured, so no glob picks up a folder that is not listed here.
HELDOUT = (
    "real_logs_heldout",
    "real_logs_heldout3",
    "real_logs_heldout4",
    "real_logs_heldout5",
    "real_logs_heldout6",
)
WORD = re.compile(r"[a-z_]{3,}")


def _labels(folder: Path) -> dict[str, dict]:
    if (folder / "labels.json").is_file():
        return json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    return yaml.safe_load((folder / "labels.yaml").read_text(encoding="utf-8"))


def words(path: Path) -> Counter[str]:
    return Counter(WORD.findall(path.read_text(encoding="utf-8", errors="replace").lower()))


class NaiveBayes:
    """Multinomial naive Bayes with add-one smoothing; log priors and likelihoods."""

    def __init__(self, docs: list[tuple[Counter[str], str]]) -> None:
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.docs: Counter[str] = Counter()
        for bag, cause in docs:
            self.counts[cause].update(bag)
            self.docs[cause] += 1
        self.vocab = {w for c in self.counts.values() for w in c}
        self.totals = {c: sum(v.values()) for c, v in self.counts.items()}

    def predict(self, bag: Counter[str]) -> str:
        n, v = sum(self.docs.values()), len(self.vocab)

        def score(cause: str) -> float:
            s = math.log(self.docs[cause] / n)
            denom = self.totals[cause] + v
            return s + sum(
                k * math.log((self.counts[cause][w] + 1) / denom) for w, k in bag.items()
            )

        return max(self.docs, key=score)


def _score(nb: NaiveBayes, folder: Path) -> dict[str, int]:
    """One batch read by the rules, then with the classifier's cause for what they leave
    unknown."""
    out = dict.fromkeys(("logs", "rules", "unknown", "fallback", "right", "wrong", "alone"), 0)
    for name, label in sorted(_labels(folder).items()):
        out["logs"] += 1
        got = diagnose_paths(folder / name).cause
        # How often its guess is right on every log of the batch: the unknowns of a new batch
        # are few, this says how far a guess on one can be trusted.
        out["alone"] += nb.predict(words(folder / name)) == label["cause"]
        out["rules"] += got == label["cause"]
        if got == "unknown":
            out["unknown"] += 1
            guess = nb.predict(words(folder / name))
            ok = guess == label["cause"]
            out["right" if ok else "wrong"] += 1
            out["fallback"] += ok
            print(
                f"  unknown {folder.name}/{name}: classifier says {guess}, label {label['cause']}"
            )
        else:
            out["fallback"] += got == label["cause"]
    return out


def main() -> None:
    development = [
        (words(folder / name), label["cause"])
        for folder in DEVELOPMENT
        for name, label in _labels(folder).items()
        # "unknown" is what the fallback replaces, never a guess of its own
        if label["cause"] != "unknown"
    ]
    batches = {name: _labels(DATA / name) for name in HELDOUT}
    results = {}
    for mode in ("development", "leave_one_batch_out"):
        print(mode)
        for held in HELDOUT:
            train = list(development)
            if mode == "leave_one_batch_out":
                # Every other held-out batch joins the training set, as a shipped classifier
                # would be trained on every labelled log there is.
                train += [
                    (words(DATA / other / name), label["cause"])
                    for other in HELDOUT
                    if other != held
                    for name, label in batches[other].items()
                ]
            results[f"{mode}/{held}"] = _score(NaiveBayes(train), DATA / held)
    # Logs with no failure in them (the synthetic corpus' logs labelled unknown, the healthy
    # loss curves): the rules say unknown; what would the fallback guess?
    nb = NaiveBayes(development)
    healthy = [DATA / "failure_logs" / n for n, lab in _labels(DATA / "failure_logs").items()]
    healthy = [p for p in healthy if _labels(DATA / "failure_logs")[p.name]["cause"] == "unknown"]
    curves = json.loads((DATA / "loss_curves" / "labels.json").read_text(encoding="utf-8"))
    healthy += [DATA / "loss_curves" / n for n, lab in curves.items() if lab["label"] != "diverged"]
    guesses = {}
    for path in healthy:
        if diagnose_paths(path).cause == "unknown":
            guesses[f"{path.parent.name}/{path.name}"] = nb.predict(words(path))
    print("healthy logs the rules leave unknown, and the fallback's guess:")
    for name, guess in guesses.items():
        print(f"  {name}: {guess}")
    results["healthy_logs_given_a_cause"] = f"{len(guesses)}/{len(healthy)}"
    print(json.dumps(results))


if __name__ == "__main__":
    main()
