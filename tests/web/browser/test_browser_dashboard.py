"""The Benchmarks page keeps itself current, on a server of its own (own_base_url: its history
starts empty and nothing has measured bandwidth): the history lists a run launched from the page
without a reload, and a roofline that lacks a ceiling says so and measures it in one click."""

from playwright.sync_api import expect

from tests.support.browser import wait_for_charts

CEILINGS = ("[...document.querySelectorAll('#job canvas')].map(c => Chart.getChart(c))"
            ".filter(c => c && c.config.type === 'line' && c.options.scales.x.type === 'logarithmic')"
            ".flatMap(c => c.data.datasets.map(d => d.label))")


def test_history_and_roofline_follow_the_runs(watched, own_base_url, screenshots):
    base_url = own_base_url
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    expect(page.locator("#history")).to_contain_text("No runs yet.")
    page.select_option("#sweep", "custom")
    page.fill("#shape", "64, 64, 64")
    page.click("#launch-form button[type=submit]")
    expect(page.locator("#history tbody tr")).to_have_count(1)  # listed as soon as it is queued
    expect(page.get_by_test_id("job-status").first).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("#history tbody tr").first).to_contain_text("succeeded")  # and when it ends
    expect(page.locator("#history tbody tr").first).to_contain_text("CSV")

    wait_for_charts(page, "#job canvas", 2)
    notice = page.get_by_test_id("roofline-missing")
    expect(notice).to_have_count(1)
    expect(notice).to_contain_text("No bandwidth run on this device yet")
    assert "measured ceilings" not in page.evaluate(CEILINGS)
    notice.get_by_role("button").click()
    # The bandwidth run ends, the matmul job's card redraws with both ceilings and no notice.
    expect(page.get_by_test_id("roofline-missing")).to_have_count(0, timeout=60_000)
    wait_for_charts(page, "#job canvas", 2)
    page.wait_for_function(f"{CEILINGS}.includes('measured ceilings')")
    expect(page.locator("#history tbody tr")).to_have_count(2)
    page.screenshot(path=screenshots / "benchmarks-roofline.png", full_page=True)
    watched.clean()
