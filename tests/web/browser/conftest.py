"""The pages in a real browser: Debian's chromium driven by Playwright, headless, against a live
server on 127.0.0.1. No skip: `make test` installs chromium where it is missing, and a browser
that cannot start fails these tests. Every test here is marked browser.

One server and one Chromium per test process (session-scoped), shared by every test: a test looks
for its own job and its own rows, never for a count or an empty history. The few that need a
server with nothing on it (an empty history, nothing measured) ask for `own_base_url`.

Screenshots: `screenshots` is a temporary directory unless TALLY_SCREENSHOTS_DIR names one
(`make screenshots` writes docs/screenshots/, the pictures the README shows). Pictures that are
only for looking at go to each test's tmp_path (pytest keeps the last three runs' under
/tmp/pytest-of-$USER/)."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from app.config import Settings
from tests.support import ROOT
from tests.support.browser import CHROMIUM, FLAGS, REPORT_CSP, Watched, served
from tests.support.marks import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, __file__, pytest.mark.browser)


def _embedded(directory: Path, worker_id: str, **settings) -> Settings:
    # The embedded dispatcher runs jobs launched from the pages, in real children, on CPU.
    return Settings(database_path=directory / "tally.db", embedded_worker=True, worker_id=worker_id,
                    **settings)


@pytest.fixture(scope="session")
def base_url(tmp_path_factory):
    """The test process's one server, shared by the browser tests."""
    with served(_embedded(tmp_path_factory.mktemp("browser"), "browser-tests")) as url:
        yield url


@pytest.fixture
def own_base_url(tmp_path):
    """A server of the test's own, for a check that needs an empty history."""
    with served(_embedded(tmp_path, "browser-own")) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def watched(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(REPORT_CSP)
    yield Watched(context.new_page())
    context.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """Where the README's pictures go: TALLY_SCREENSHOTS_DIR (relative to the checkout) when set,
    else a temporary directory, so a test run leaves the checkout as it found it."""
    asked = os.environ.get("TALLY_SCREENSHOTS_DIR")
    folder = ROOT / asked if asked else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
