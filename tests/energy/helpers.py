"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def pdf_pages(pdf: bytes, tmp_path: Path) -> int:
    """Pages of a PDF as poppler renders them (pdftoppm, one PNG per page)."""
    src = tmp_path / "report.pdf"
    src.write_bytes(pdf)
    subprocess.run(["pdftoppm", "-r", "20", "-png", src, tmp_path / "page"], check=True)
    return len(list(tmp_path.glob("page*.png")))
