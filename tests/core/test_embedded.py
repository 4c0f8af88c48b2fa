"""Where the embedded servers keep their data by default: `.vigil/` at the project root, the
folder `make clean` removes and `.gitignore` names (not inside the package)."""

from __future__ import annotations

from tests.helpers import ROOT
from webapp.core import embedded


def test_default_data_folder_is_vigil_at_the_project_root(monkeypatch):
    monkeypatch.delenv("VIGIL_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/tmp")  # data_dir() would set it otherwise
    assert embedded.data_dir() == (ROOT / ".vigil").resolve()
