"""CI cannot go green without Chromium and Slurm: with the requirement set, a missing part
fails the run; without it, the tests skip and say why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

NEEDS_BOTH = """
from tests.browser.conftest import browser  # noqa: F401 (the fixture under test)
from tests.slurm import slurm_cluster  # noqa: F401


def test_needs_chromium(browser):
    pass


def test_needs_slurm(slurm_cluster):
    pass
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """pytest in a subprocess over two tests that need the parts, neither part reachable."""
    test_file = tmp_path / "test_needs_real_parts.py"
    test_file.write_text(NEEDS_BOTH)
    empty = tmp_path / "no-binaries"
    empty.mkdir(exist_ok=True)
    full = {k: v for k, v in os.environ.items() if k != "VIGIL_REQUIRE_REAL_PARTS"}
    # No Chromium at its path, no Slurm client tools on PATH (sys.executable is absolute).
    full.update(VIGIL_TEST_CHROMIUM=str(tmp_path / "no-chromium"), PATH=str(empty), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(test_file), "-p", "no:randomly", "-q",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")],
        cwd=ROOT, env=full, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_required_parts_that_are_missing_fail_the_run(tmp_path):
    result = _run(tmp_path, VIGIL_REQUIRE_REAL_PARTS="chromium,slurm")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 errors" in result.stdout, result.stdout
    assert "chromium is required (VIGIL_REQUIRE_REAL_PARTS)" in result.stdout
    assert "slurm is required (VIGIL_REQUIRE_REAL_PARTS)" in result.stdout


def test_without_the_requirement_they_skip_saying_why(tmp_path):
    result = _run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 skipped" in result.stdout
    assert "no-chromium not found" in result.stdout
    assert "not found: install Debian's slurm-wlm" in result.stdout


def test_a_misspelt_part_fails_instead_of_requiring_nothing(tmp_path):
    result = _run(tmp_path, VIGIL_REQUIRE_REAL_PARTS="chrome")
    assert result.returncode == 1
    assert "VIGIL_REQUIRE_REAL_PARTS names chrome" in result.stdout


@pytest.mark.parametrize("ci", ["true", ""])
def test_make_test_requires_the_parts_exactly_when_ci_is_set(ci):
    """`make -n` prints the commands without running them."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = ci
    printed = subprocess.run(
        ["make", "-n", "-o", "test-deps", "test"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pytest_line = next(line for line in printed.splitlines() if " -m pytest" in line)
    assert ("VIGIL_REQUIRE_REAL_PARTS=chromium,slurm" in pytest_line) == bool(ci)


def test_ci_runs_exactly_make_test():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in lines if line.strip() and not line.startswith("#")]
    assert commands[-1] == "make test"
