"""Headless Debian Chromium driven by Playwright's sync API against pytest-django's live_server.

Playwright's sync API runs an event loop in the test thread, and Django refuses ORM calls in
a thread with a running loop ("SynchronousOnlyOperation"); the tests seed and check data in
that same thread, so the check is switched off for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.realparts import missing
from tests.telemetry.conftest import SmallFleet, seed_small_fleet

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

# Debian's Chromium; VIGIL_TEST_CHROMIUM points elsewhere (tests/test_realparts.py points it
# at nothing to prove a missing browser fails CI).
CHROMIUM = os.environ.get("VIGIL_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        missing("chromium", f"{CHROMIUM} not found: install Debian's chromium (make test-deps)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class PageLog:
    """What the page complained about, and every request that left the live server."""

    base_url: str
    errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)


@pytest.fixture
def page_log(live_server) -> PageLog:
    return PageLog(base_url=live_server.url)


@pytest.fixture
def page(browser, page_log: PageLog) -> Iterator:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    # A navigation waits for the server: the 2,048-GPU job page renders in 1-3 s here but took
    # over 15 s on a loaded 2-core CI machine. Elements still have 15 s to appear.
    pg.set_default_navigation_timeout(60_000)
    pg.on("console", lambda m: page_log.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda exc: page_log.errors.append(f"uncaught: {exc}"))
    pg.on(
        "request",
        lambda r: (
            None
            if r.url.startswith((page_log.base_url, "data:"))
            else page_log.foreign_requests.append(r.url)
        ),
    )
    yield pg
    context.close()


@pytest.fixture
def screenshot_dir(tmp_path_factory) -> Path:
    """Where screenshots go: VIGIL_SCREENSHOT_DIR if set (to look at them), else pytest's own
    temporary folder, which pytest prunes (a folder per test left in /tmp would pile up)."""
    configured = os.environ.get("VIGIL_SCREENSHOT_DIR")
    path = Path(configured) if configured else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def live_fleet(transactional_db) -> SmallFleet:
    """The small fleet, committed so the live server's threads see it."""
    return seed_small_fleet()


@pytest.fixture
def operator_login(page, live_server, operator):
    """Log in through the login form, as a person would."""

    def login(next_path: str = "/") -> None:
        page.goto(f"{live_server.url}/login/?next={next_path}")
        page.fill("input[name=username]", operator.username)
        page.fill("input[name=password]", PASSWORD)
        # The page after login may be a big one: its navigation gets the 60 s, not the click.
        with page.expect_navigation(wait_until="load"):
            page.click("button[type=submit]", no_wait_after=True)

    return login
