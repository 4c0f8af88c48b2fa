"""What the benches share: a private embedded PostgreSQL and Redis for Django, and the p95."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
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
    # Production refuses none or "*": the hosts a bench asks by (Django's test client sends
    # "testserver", a bench's own server is asked on 127.0.0.1).
    os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")
    os.environ.setdefault("VIGIL_BASE_URL", "http://localhost")  # required in production
    import django

    django.setup()


def static_without_manifest() -> None:
    """Static URLs without collectstatic's manifest: a bench measures pages, not static files,
    and runs from a checkout that never ran collectstatic."""
    from django.conf import settings

    settings.STORAGES["staticfiles"]["BACKEND"] = (
        "django.contrib.staticfiles.storage.StaticFilesStorage"
    )


@contextlib.contextmanager
def bench_site(
    prefix: str = "vigil-bench-", *, debug: bool = False, unset: tuple[str, ...] = ()
) -> Iterator[Path]:
    """A Vigil of the bench's own for the `with` block: Django set up (`django_embedded`) in a
    new temporary folder, static URLs without a manifest, the database migrated; afterwards
    the embedded servers stopped and the folder removed (kept with VIGIL_BENCH_KEEP set).
    Yields the folder."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    django_embedded(tmp, debug=debug, unset=unset)
    static_without_manifest()
    from django.core.management import call_command

    from webapp.core import embedded

    try:
        call_command("migrate", verbosity=0)
        yield tmp
    finally:
        embedded.stop_all()
        if not os.environ.get("VIGIL_BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


def p95(values: list[float]) -> float:
    """The 95th percentile by nearest rank (the benches' runs are few: no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
