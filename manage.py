#!/usr/bin/env python
"""Django's command-line utility for Vigil."""

import os
import sys

OFFLINE_COMMANDS = {"diagnose", "eval_plan", "xid_catalog_refresh"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    # Commands that work on files alone run without a database or broker (no embedded
    # servers are started for them).
    if len(sys.argv) > 1 and sys.argv[1] in OFFLINE_COMMANDS:
        os.environ.setdefault("VIGIL_OFFLINE", "true")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
