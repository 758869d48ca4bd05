"""Fixtures of the console's browser tests: Debian's chromium driven by Playwright (never a
downloaded browser), a page per test at a laptop's size, and screenshots kept as
artefacts under ``artifacts/console/``."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "console"

LAPTOP: ViewportSize = {"width": 1366, "height": 900}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module, not per session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and tests elsewhere run servicers with asyncio.run.
    executable = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    if executable is None:
        # `make test` installs it first (`make browser-install`): a failure, never a skip.
        pytest.fail("chromium is not installed: run `make browser-install`")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage) at laptop size. Script errors fail the test."""
    context = browser.new_context(viewport=LAPTOP)
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    script_errors: list[str] = []
    opened.on("pageerror", lambda exc: script_errors.append(str(exc)))
    yield opened
    context.close()
    assert not script_errors, script_errors


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Callable[[Page, str], Path]:
    """Saves a full-page screenshot as ``artifacts/console/<test>-<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(page: Page, name: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


def sign_in(page: Page, base_url: str, key: str, view: str = "queue") -> None:
    page.goto(f"{base_url}/console/#/{view}")
    page.get_by_label("Operator key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Views").wait_for()
