"""The Calibration and Accuracy pages in Chromium: a profile built from stored runs, held-out steps
scored against it, the ledger's table and one chart per metric drawn, nothing off the box."""

import httpx
import pytest
from playwright.sync_api import expect

from app.config import Settings
from app.jobs.store import Store
from app.probes import campaign
from tests.calibration.test_profiles import store_matmul, store_steps
from tests.support.browser import served, wait_for_charts


@pytest.fixture
def own_base_url(tmp_path):
    """A server of the test's own with no dispatcher: the test writes finished jobs into its database,
    which a dispatcher would race it to claim."""
    with served(Settings(database_path=tmp_path / "tally.db", embedded_worker=False)) as url:
        yield url


def test_the_accuracy_page_draws_predicted_against_measured(watched, own_base_url, tmp_path, screenshots):
    store = Store(tmp_path / "tally.db")  # the own server's database
    store_matmul(store)
    store_steps(store, campaign.train_steps("cpu"))
    built = httpx.post(f"{own_base_url}/api/v1/calibration/profiles", timeout=30)
    assert built.status_code == 201, built.text
    store_steps(store, campaign.held_out("cpu")[:4])
    page = watched.page
    page.goto(f"{own_base_url}/accuracy", wait_until="networkidle")
    table = page.get_by_test_id("accuracy-table")
    expect(table).to_contain_text("calibrated (v1)")
    metrics = {p["metric"] for p in httpx.get(f"{own_base_url}/api/v1/accuracy", timeout=30).json()["points"]}
    wait_for_charts(page, "canvas[data-chart]", len(metrics))
    page.screenshot(path=str(screenshots / "accuracy.png"), full_page=True)
    page.goto(f"{own_base_url}/calibration", wait_until="networkidle")
    expect(page.get_by_test_id("calibration-profiles")).to_contain_text(built.json()["device_model"])
    expect(page.get_by_test_id("profile-figures")).to_contain_text("train step fp32")
    expect(page.get_by_test_id("start-calibration")).to_be_visible()
    watched.clean()
