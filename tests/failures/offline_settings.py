"""Settings for running `manage.py diagnose` in tests before webapp.failures is installed."""

from webapp.settings import *  # noqa: F403

if "webapp.failures" not in INSTALLED_APPS:  # noqa: F405
    INSTALLED_APPS = [*INSTALLED_APPS, "webapp.failures"]  # noqa: F405
