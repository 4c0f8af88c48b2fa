"""Real parts that a machine may lack (Chromium, Slurm, Prometheus, Alertmanager): skipped
locally, required in CI.

`make test` sets VIGIL_REQUIRE_REAL_PARTS=chromium,slurm,prometheus,alertmanager when CI is
set; a fixture that finds its part missing then fails the run instead of skipping, so CI can
never go green without the browser, scheduler and Prometheus tests.
"""

from __future__ import annotations

import os

import pytest

PARTS = frozenset({"chromium", "slurm", "prometheus", "alertmanager"})


def required() -> frozenset[str]:
    """The parts VIGIL_REQUIRE_REAL_PARTS names (comma-separated); a name it does not know fails."""
    names = {p.strip() for p in os.environ.get("VIGIL_REQUIRE_REAL_PARTS", "").split(",")}
    names.discard("")
    unknown = names - PARTS
    if unknown:
        pytest.fail(
            f"VIGIL_REQUIRE_REAL_PARTS names {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(PARTS))}",
            pytrace=False,
        )
    return frozenset(names)


def missing(part: str, reason: str) -> None:
    """Skip (locally) or fail (where `part` is required) because `part` is not here."""
    if part in required():
        pytest.fail(f"{part} is required (VIGIL_REQUIRE_REAL_PARTS) but {reason}", pytrace=False)
    pytest.skip(reason)
