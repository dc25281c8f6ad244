"""The data_loader and checkpoint job pages in a real browser, each job run through the real
dispatcher and child on the CPU: the charts drawn with the result's figures, readable axes, no
console error, nothing fetched off the box."""

from playwright.sync_api import expect

from tests.support.browser import AXES, cancel_launched, readable, run, wait_for_charts

QUICK = {"device": "cpu", "warmup_s": 0.01, "measure_s": 0.05, "min_iters": 3, "max_iters": 20}
CRUNCHER = {"kind": "cruncher", "dim": 256, "num_layers": 2}

SETS = """() => [...document.querySelectorAll('canvas')].map(c => Chart.getChart(c).data.datasets.map(
  d => [d.label, d.data]))"""


def test_the_data_loader_page_sets_the_loader_beside_the_train_step(watched, base_url, tmp_path):
    job = run(base_url, "data_loader", QUICK | {"model": CRUNCHER, "batch_size": 8, "seq_len": 128,
                                                "file_bytes": 4 * 2**20})
    page = watched.page
    page.goto(base_url + f"/benchmarks/jobs/{job}", wait_until="networkidle")
    wait_for_charts(page, "canvas", 1)
    result = page.request.get(base_url + f"/api/v1/jobs/{job}").json()["result"]
    (loader, train), = page.evaluate(SETS)
    assert loader == ["get_batch (median batch)", [result["modes"][0]["tokens_per_sec"], None]]
    assert train == ["train step", [None, result["train_tokens_per_s"]]]
    assert result["train_source"] == "measured"
    expect(page.get_by_test_id("loader-summary")).to_contain_text("timed in this job")
    expect(page.get_by_test_id("metric-pageable/headroom")).to_contain_text("headroom over the train step")
    expect(page.get_by_test_id("loader-modes").locator("tbody tr")).to_have_count(1)  # no pinned on a CPU
    readable(page.evaluate(AXES))
    page.screenshot(path=tmp_path / "data-loader.png", full_page=True)
    watched.clean()


def test_the_checkpoint_page_sets_the_file_beside_the_prediction(watched, base_url, tmp_path):
    job = run(base_url, "checkpoint", QUICK | {"model": CRUNCHER, "optimizer": "adamw", "repeats": 2})
    page = watched.page
    page.goto(base_url + f"/benchmarks/jobs/{job}", wait_until="networkidle")
    wait_for_charts(page, "canvas", 2)
    result = page.request.get(base_url + f"/api/v1/jobs/{job}").json()["result"]
    parts, speed = page.evaluate(SETS)
    # MB: 131,328 parameters x (4 bytes of weight + 8 of AdamW's two moments), predicted; the file measured.
    assert sum(d[0] for _, d in parts) == 131_328 * 12 / 1e6
    assert abs(sum(d[1] for _, d in parts) - result["file_bytes"] / 1e6) < 1e-9
    assert [label for label, _ in parts] == ["parameters", "optimizer state",
                                             "overhead (step counters, pickle, zip)"]
    assert speed == [["GB/s (median)", [result["write_bytes_per_s"] / 1e9, result["read_bytes_per_s"] / 1e9,
                                        result["read_warm_bytes_per_s"] / 1e9]]]
    expect(page.get_by_test_id("metric-bytes")).to_contain_text("checkpoint bytes, predicted vs file")
    expect(page.get_by_test_id("checkpoint-speed-caption")).to_contain_text("2 writes and reads")
    readable(page.evaluate(AXES))
    page.screenshot(path=tmp_path / "checkpoint.png", full_page=True)
    watched.clean()


def test_the_launch_form_shows_the_train_steps_fields_for_both_probes(watched, base_url, tmp_path):
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    step = page.locator("fieldset[data-probe~=train_step]")
    loader = page.locator("fieldset[data-probe=data_loader]")
    for probe, loader_shown in (("data_loader", True), ("checkpoint", False), ("train_step", False)):
        page.select_option("#probe", probe)
        expect(step).to_be_visible()
        expect(loader).to_be_visible() if loader_shown else expect(loader).to_be_hidden()
        expect(page.locator("fieldset[data-probe=generate]")).to_be_hidden()
    page.select_option("#probe", "data_loader")
    page.fill("#file_bytes", "2MiB")
    page.fill("#dim", "64")
    page.fill("#seq_len", "32")
    page.screenshot(path=tmp_path / "launch-data-loader.png", full_page=True)
    with page.expect_request(lambda r: r.url.endswith("/ui/benchmarks/launch")) as launched:
        page.click("#launch-form button[type=submit]")
    body = launched.value.post_data
    assert "probe=data_loader" in body and "file_bytes=2MiB" in body
    expect(page.locator("#job")).to_contain_text("data_loader")
    cancel_launched(page, base_url)
    watched.clean()
