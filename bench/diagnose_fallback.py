"""Would an offline classifier for what the rules leave `unknown` help? Measured, not shipped.

    .venv/bin/python bench/diagnose_fallback.py

Trains a multinomial naive Bayes over the words of each log (lowercased runs of letters, digits
removed: paths, pids and times are noise) on the development corpora (tests/data/real_logs and
the synthetic tests/data/failure_logs), then reads every held-out batch
(tests/data/real_logs_heldout*) two ways:
  1. as a fallback: only the logs the rules leave `unknown` get the classifier's cause;
  2. alone: the classifier's cause for every held-out log, to see how far its guess can be
     trusted where the rules have nothing to say.
Last line: JSON with the rules' cause count, the count with the fallback, the unknowns it turned
right and wrong, and the classifier's accuracy alone. Not a test.
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


def main() -> None:
    train = []
    for folder in (DATA / "real_logs", DATA / "failure_logs"):
        for name, label in _labels(folder).items():
            train.append((words(folder / name), label["cause"]))
    nb = NaiveBayes(train)
    total = rules_right = fallback_right = turned_right = turned_wrong = alone_right = 0
    for folder in sorted(DATA.glob("real_logs_heldout*")):
        for name, label in sorted(_labels(folder).items()):
            total += 1
            got = diagnose_paths(folder / name).cause
            guess = nb.predict(words(folder / name))
            rules_right += got == label["cause"]
            alone_right += guess == label["cause"]
            if got == "unknown":
                ok = guess == label["cause"]
                turned_right += ok
                turned_wrong += not ok
                fallback_right += ok
                print(
                    f"unknown {folder.name}/{name}: classifier says {guess}, label {label['cause']}"
                )
            else:
                fallback_right += got == label["cause"]
    print(
        json.dumps(
            {
                "heldout_logs": total,
                "rules_cause": rules_right,
                "rules_plus_fallback_cause": fallback_right,
                "unknowns_turned_right": turned_right,
                "unknowns_turned_wrong": turned_wrong,
                "classifier_alone_cause": alone_right,
            }
        )
    )


if __name__ == "__main__":
    main()
