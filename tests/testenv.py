"""Loaded first (`-p tests.testenv`), before Django settings: keep the test servers apart.

Tests get their own embedded PostgreSQL and Redis under `.vigil/test/` (unless DATABASE_URL /
CELERY_BROKER_URL point elsewhere), so a running `make demo` never consumes test batches.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("VIGIL_DATA_DIR", str(ROOT / ".vigil" / "test"))
Path(os.environ["VIGIL_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
