"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def pdf_pages(pdf: bytes, tmp_path: Path) -> int:
    """Pages of a PDF as poppler renders them (pdftoppm, one PNG per page)."""
    src = tmp_path / "report.pdf"
    src.write_bytes(pdf)
    subprocess.run(["pdftoppm", "-r", "20", "-png", src, tmp_path / "page"], check=True)
    return len(list(tmp_path.glob("page*.png")))


def teams_named_as_accounts(*accounts: str) -> None:
    """A Team per account, named as it and owning it by one rule: the rig's jobs then read
    the same by team as by account (a team is the teams app's Team, energy/teams.py)."""
    from webapp.teams.models import Team, TeamRule

    for account in accounts:
        team = Team.objects.create(name=account)
        TeamRule.objects.create(field="team", pattern=re.escape(account), team=team)
