"""A server that requires a token, in a real browser: the link it logs (/?token=...) hands the
token to the dashboard once; the browser keeps it for that origin, takes it out of the address
bar, and the launch form sends it, so a run starts without typing it again."""

import pytest
from playwright.sync_api import expect

from app.config import Settings
from tests.support.browser import served

TOKEN = "Tok3n-s3cret_for-the-browser"


@pytest.fixture(scope="module")
def token_url(tmp_path_factory):
    """A server of its own that requires TOKEN."""
    settings = Settings(database_path=tmp_path_factory.mktemp("token") / "tally.db", embedded_worker=True,
                        worker_id="token-tests", api_token=TOKEN)
    with served(settings) as url:
        yield url


def test_the_logged_link_hands_the_token_to_the_launch_form(watched, token_url):
    base_url = token_url
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    page.select_option("#sweep", "custom")
    page.fill("#shape", "32, 32, 32")
    page.click("#launch-form button[type=submit]")
    expect(page.locator("#authorization-error")).not_to_be_empty()  # no token yet: refused

    page.goto(base_url + f"/?token={TOKEN}", wait_until="networkidle")
    assert "token" not in page.url  # out of the address bar (and so of history and bookmarks)
    assert page.evaluate("localStorage.getItem('tally-api-token')") == TOKEN
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    expect(page.locator("#token")).to_have_value(TOKEN)
    page.select_option("#sweep", "custom")
    page.fill("#shape", "32, 32, 32")
    page.click("#launch-form button[type=submit]")
    expect(page.get_by_test_id("job-status").first).to_have_text("succeeded", timeout=60_000)
    watched.clean()
