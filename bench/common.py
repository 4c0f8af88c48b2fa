"""What the benches share: a private embedded PostgreSQL and Redis for Django, and the p95."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def django_embedded(data_dir: Path | str, *, debug: bool, unset: tuple[str, ...] = ()) -> None:
    """Django set up against its own embedded servers under `data_dir` (started on first use),
    never a developer's DATABASE_URL / CELERY_BROKER_URL; `debug` false runs production settings
    (no DEBUG cursor wrapper), as a deployed worker does."""
    os.environ["VIGIL_DATA_DIR"] = str(data_dir)
    for var in ("DATABASE_URL", "CELERY_BROKER_URL", *unset):
        os.environ.pop(var, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    os.environ.setdefault("VIGIL_DEBUG", "true" if debug else "false")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(48))
    os.environ.setdefault("ALLOWED_HOSTS", "localhost")  # production refuses none or "*"
    os.environ.setdefault("VIGIL_BASE_URL", "http://localhost")  # required in production
    import django

    django.setup()


def p95(values: list[float]) -> float:
    """The 95th percentile by nearest rank (the benches' runs are few: no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
