"""The calculator pages' charts and layout in a real browser (issue 12): the memory chart
shows what changes the bytes, with the GPU's capacity drawn over the bars; the time chart
is centred on the run, marks it and labels its ticks readably; a phone keeps the memory
table's rows on one line; "measured" MFU offers the probe that would measure it."""

import httpx
from playwright.sync_api import expect

from tests.support.browser import wait_for_charts

CHART = "Chart.getChart(document.querySelector('#result canvas'))"
# Datasets in the order Chart.js draws them: it draws the sorted list from its end, so the
# first one is drawn last, on top.
DRAWN_LAST = f"{CHART}.getSortedVisibleDatasetMetas()[0].label"


def _page(browser, **context):
    return browser.new_context(**({"viewport": {"width": 1280, "height": 900}} | context)).new_page()


def test_memory_chart_shows_what_changes_with_the_capacity_on_top(browser, base_url, tmp_path):
    page = _page(browser)
    # One data-parallel rank: every ZeRO stage holds the same bytes, so the ranks are charted.
    page.goto(base_url + "/memory?model=llama3-8b&gpu=h100-sxm&seq_len=4096&zero_stage=1&data_parallel=1",
              wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 1)
    assert page.evaluate(f"{CHART}.data.labels") == [str(2**i) for i in range(11)]
    assert page.evaluate(f"{CHART}.options.scales.x.title.text") == "data-parallel ranks"
    assert page.evaluate(DRAWN_LAST) == "h100-sxm memory"
    expect(page.get_by_test_id("memory-chart-caption")).to_contain_text("every ZeRO stage holds the same")
    # ZeRO 1 over more ranks shards the optimizer state: the bars fall (the 1-rank one is tallest).
    totals = page.evaluate(f"{CHART}.data.datasets.filter(d => d.stack === 'memory')"
                           ".reduce((t, d) => t.map((x, i) => x + d.data[i]), Array(11).fill(0))")
    assert totals[0] > totals[-1]
    # Eight ranks: the ZeRO stages differ, and that chart stays.
    page.select_option("#zero_stage", "0")
    page.fill("#data_parallel", "8")
    page.wait_for_function("() => { const c = Chart.getChart(document.querySelector('#result canvas'));"
                           " return c !== undefined && c.data.labels[0] === 'ZeRO 0'; }")
    assert page.evaluate(f"{CHART}.data.labels") == ["ZeRO 0", "ZeRO 1", "ZeRO 2", "ZeRO 3"]
    assert page.evaluate(DRAWN_LAST) == "h100-sxm memory"
    page.screenshot(path=tmp_path / "i12-memory.png", full_page=True)
    page.context.close()


def test_memory_chart_at_the_defaults_charts_sequence_length(browser, base_url):
    """ZeRO 0 on one rank: neither the stage nor more ranks change a GPU's bytes; the
    sequence length does (activations)."""
    page = _page(browser)
    page.goto(base_url + "/memory", wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 1)
    assert page.evaluate(f"{CHART}.options.scales.x.title.text") == "sequence length (tokens)"
    assert "4096" in page.evaluate(f"{CHART}.data.labels")
    page.context.close()


def test_time_chart_is_centred_on_the_run_and_readable(browser, base_url, tmp_path):
    page = _page(browser)
    page.goto(base_url + "/time?params=70e9&tokens=15e12&gpu=h100-sxm&num_gpus=8", wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 1)
    x = page.evaluate("() => { const s = " + CHART + ".scales.x; return {min: s.min, max: s.max,"
                      " labels: s.ticks.map(t => t.label), values: s.ticks.map(t => t.value),"
                      " pixels: s.ticks.map(t => s.getPixelForValue(t.value)),"
                      " widths: s._labelSizes.widths}; }")
    assert x["min"] <= 8 / 8 and x["max"] >= 8 * 8  # 1/16 .. 16x the run, clamped at 1 GPU
    assert x["min"] < 8 < x["max"]
    # Ticks on 1-2-5 values, labelled as pages write numbers, and no two labels touching.
    assert all(str(int(v))[0] in "125" and set(str(int(v))[1:]) <= {"0"} for v in x["values"]), x["values"]
    assert all("." not in label for label in x["labels"]), x["labels"]
    for i in range(len(x["pixels"]) - 1):
        gap = x["pixels"][i + 1] - x["pixels"][i]
        assert gap > (x["widths"][i] + x["widths"][i + 1]) / 2, (x["labels"], x["pixels"], x["widths"])
    y_labels = page.evaluate(f"{CHART}.scales.y.ticks.map(t => t.label)")
    assert y_labels and not [label for label in y_labels if label.endswith("0000") or "1.0000" in label]
    run = page.evaluate(f"{CHART}.data.datasets[1]")
    # 6 x 70e9 x 15e12 FLOPs on 8 H100s (989.5 TFLOP/s dense bf16) at MFU 0.5, in days.
    days = 6 * 70e9 * 15e12 / (989.5e12 * 8 * 0.5) / 86400
    assert len(run["data"]) == 1 and run["data"][0]["x"] == 8
    assert abs(run["data"][0]["y"] - days) / days < 1e-9
    assert run["label"].startswith("this run: 8 GPUs, ")
    page.screenshot(path=tmp_path / "i12-time.png", full_page=True)
    page.context.close()


def test_the_memory_table_rows_stay_on_one_line_on_a_phone(browser, base_url, tmp_path):
    page = _page(browser, viewport={"width": 390, "height": 844})
    page.goto(base_url + "/memory?model=llama3-8b&gpu=h100-sxm&seq_len=4096", wait_until="networkidle")
    cells = page.evaluate("[...document.querySelectorAll('.breakdown td, .breakdown th')].map(c => {"
                          " const s = getComputedStyle(c); return {h: c.getBoundingClientRect().height,"
                          " line: parseFloat(s.lineHeight) || 1.5 * parseFloat(s.fontSize),"
                          " pad: parseFloat(s.paddingTop) + parseFloat(s.paddingBottom)}; })")
    assert cells
    for cell in cells:
        assert cell["h"] < cell["pad"] + 1.5 * cell["line"], cell
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    page.screenshot(path=tmp_path / "i12-memory-390.png", full_page=True)
    page.context.close()


def test_emptying_parameters_says_so_beside_it(browser, base_url):
    page = _page(browser)
    page.goto(base_url + "/time?params=70e9&tokens=15e12", wait_until="networkidle")
    page.fill("#params", "")
    expect(page.locator("#params-error")).to_contain_text("give params")
    page.context.close()


def test_measured_mfu_offers_the_probe_and_launches_it(browser, base_url):
    page = _page(browser)
    page.goto(base_url + "/time?params=70e9&tokens=15e12&gpu=h100-sxm&num_gpus=1024",
              wait_until="networkidle")
    page.fill("#mfu", "measured")
    expect(page.locator("#mfu-error")).to_contain_text("train_step")
    button = page.get_by_test_id("run-probe")
    expect(button).to_contain_text("bf16_autocast")
    button.click()
    status = page.locator("#mfu-probe").get_by_test_id("job-status")
    expect(status).to_be_visible(timeout=15_000)  # the job's card, as the benchmarks page shows it
    job_id = int(page.locator("#mfu-probe article.job").get_attribute("id").removeprefix("job-"))
    job = httpx.get(f"{base_url}/api/v1/jobs/{job_id}").json()
    assert job["probe"] == "train_step" and job["params"]["precision"] == "bf16_autocast"
    httpx.post(f"{base_url}/api/v1/jobs/{job_id}/cancel")  # the check is the launch, not the run
    page.context.close()
