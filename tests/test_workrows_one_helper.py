"""One helper claims every leased row (webapp/core/workrows.py): no app writes a lease or
locks a row to claim it by its own means, and each run record has its lease spec.

Read on the source (nothing is imported), like tests/test_layering.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELPER = ROOT / "webapp" / "core" / "workrows.py"
# A lease written or a row claimed by a lock, outside the helper.
CLAIM_BY_HAND = re.compile(r"\b(?:lease_until|claimed_by)\s*=(?!=)|skip_locked")
RUN_RECORDS = {
    "Notification",
    "RecoveryAction",
    "EnergyExport",
    "EnergyReportDelivery",
    "EvaluationRun",
}


def _sources() -> list[Path]:
    return [
        p
        for p in sorted((ROOT / "webapp").rglob("*.py"))
        if "migrations" not in p.parts and p != HELPER
    ]


def test_no_app_writes_a_lease_or_claims_a_row_by_a_lock():
    offenders = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            # Model fields (`lease_until = models.DateTimeField(...)`) declare, not write.
            if isinstance(node, ast.keyword) and node.arg in ("lease_until", "claimed_by"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.value.lineno} {node.arg}=")
            if isinstance(node, ast.keyword) and node.arg == "skip_locked":
                offenders.append(f"{path.relative_to(ROOT)}:{node.value.lineno} skip_locked")
            sql = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if sql and CLAIM_BY_HAND.search(node.value) and "UPDATE" in node.value.upper():
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} SQL")
    assert offenders == []


def test_every_run_record_is_claimed_through_a_lease_spec():
    specs = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "LeaseSpec"
                and node.args
                and isinstance(node.args[0], ast.Name)
            ):
                specs.add(node.args[0].id)
    assert specs == RUN_RECORDS
