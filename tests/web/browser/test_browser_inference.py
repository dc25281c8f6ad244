"""The Inference page in a real browser: its two charts drawn from the API's answer (the
memory stack with the usable memory over the bars, tokens/s against batch with the
compute-bound knee), the form following a change, a refused field's message beside it even
inside the closed "More settings", no console error and nothing fetched off the box."""

import math

import httpx
from playwright.sync_api import expect

from tests.support.browser import assert_fits_a_phone, wait_for_charts, watched_at
from tests.support.devices import H100_REPORTED_BYTES

# Short requests (512 + 128 tokens): a sequence's cache read stays below its FLOPs' time, so
# decode turns compute-bound at some batch. Memory at 8k tokens per sequence.
EXAMPLE = {"model": "llama3.1-70b", "weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2,
           "tensor_parallel": 2, "context": 8192, "concurrency": 16, "prompt_tokens": 512,
           "output_tokens": 128, "price_per_gpu_hour": 2.5}
QUERY = "&".join(f"{k}={v}" for k, v in EXAMPLE.items())
MEMORY_FIELDS = ("model", "weight_format", "gpu", "num_gpus", "tensor_parallel", "context", "concurrency")
CHART = "Chart.getChart(document.querySelectorAll('#result canvas')[{}])"
# Chart.js draws the sorted list from its end: the first entry is drawn last, on top.
DRAWN_LAST = CHART.format(0) + ".getSortedVisibleDatasetMetas()[0].label"


def _watched(browser, width=1280, height=900):
    return watched_at(browser, width, height)


def _api(base_url, route, body):
    response = httpx.post(f"{base_url}/api/v1/inference/{route}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_two_charts_are_the_apis_curves(browser, base_url, screenshots):
    watched = _watched(browser)
    page = watched.page
    page.goto(f"{base_url}/inference?{QUERY}", wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 2)
    memory = _api(base_url, "memory", {k: EXAMPLE[k] for k in MEMORY_FIELDS})
    time = _api(base_url, "time", {k: v for k, v in EXAMPLE.items() if k != "context"})
    # The stack: one bar per concurrency of by_concurrency, weights + KV cache + vLLM's activation
    # peak + its memory outside torch summing to its total, the usable memory (0.9 x what the H100 reports) drawn over the bars.
    stack = page.evaluate(f"(() => {{ const c = {CHART.format(0)}; return {{labels: c.data.labels,"
                          " sets: c.data.datasets.map(d => ({label: d.label, data: d.data}))}; })()")
    assert stack["labels"] == [f"{p['concurrency']:,}" for p in memory["by_concurrency"]]
    bars = [s for s in stack["sets"] if not s["label"].startswith("usable")]
    assert [s["label"] for s in bars] == ["weights", "KV cache", "activations", "outside torch"]
    for i, point in enumerate(memory["by_concurrency"]):
        assert abs(sum(s["data"][i] for s in bars) - point["total_bytes"] / 1e9) < 1e-6
    (line,) = [s for s in stack["sets"] if s["label"].startswith("usable")]
    assert line["data"] == [memory["usable_bytes"] / 1e9] * len(stack["labels"])
    assert memory["usable_bytes"] == math.ceil(0.9 * H100_REPORTED_BYTES)  # vLLM's 0.9 of the device's total
    assert page.evaluate(DRAWN_LAST) == line["label"]
    # Tokens/s against batch: the decode curve, and the compute-bound batch as a vertical line.
    curve = page.evaluate(f"{CHART.format(1)}.data.datasets.map(d => ({{label: d.label, data: d.data}}))")
    assert curve[0]["data"] == [{"x": p["batch"], "y": p["tokens_per_sec"], "bound": p["bound"]}
                                for p in time["decode_curve"]]
    knee = time["compute_bound_batch"]
    # The overhead line: the roofline's tokens/s at each batch, drawn beside the curve.
    assert curve[1]["label"] == "roofline (no overhead)"
    assert [(p["x"], p["y"]) for p in curve[1]["data"]] == [
        (p["batch"], p["batch"] / p["roofline_seconds"]) for p in time["decode_curve"]]
    assert knee is not None and [p["x"] for p in curve[2]["data"]] == [knee, knee]
    assert page.evaluate(f"{CHART.format(1)}.options.scales.x.type") == "logarithmic"
    expect(page.get_by_test_id("decode-chart-caption")).to_contain_text(f"batch {knee:,}")
    expect(page.get_by_test_id("fits")).to_have_text("yes" if memory["fits"] else "no")
    page.screenshot(path=screenshots / "inference.png", full_page=True)
    watched.clean()
    page.context.close()


def test_the_form_follows_a_change_and_says_when_decode_stays_memory_bound(browser, base_url):
    """Llama-3.1-8B in bf16 at 576 tokens: a sequence's cache read (576 x 131,072 bytes, 32
    layers x 8 KV heads x 128 x 2 x 2 bytes per token, on 3.35 TB/s) takes longer than its
    ~16 GFLOPs (2 x 8B) at 990 TFLOP/s, so no batch turns compute-bound."""
    watched = _watched(browser)
    page = watched.page
    page.goto(f"{base_url}/inference?{QUERY}", wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 2)
    page.select_option("#model", "llama3.1-8b")
    page.select_option("#weight_format", "bfloat16")
    page.fill("#num_gpus", "1")
    page.fill("#tensor_parallel", "1")
    page.fill("#prompt_tokens", "512")
    page.fill("#output_tokens", "128")
    expect(page.get_by_test_id("memory-bound")).to_be_visible()
    assert "model=llama3.1-8b" in page.url  # the result is a link
    # A function, not an expression: polling an expression evaluates a string, which the CSP refuses.
    page.wait_for_function("() => [...document.querySelectorAll('#result canvas')]"
                           ".filter(c => Chart.getChart(c) !== undefined).length === 2")
    labels = page.evaluate(f"{CHART.format(1)}.data.datasets.map(d => d.label)")
    assert not [label for label in labels if label.startswith("compute-bound")]
    watched.clean()
    page.context.close()


def test_a_refused_setting_opens_more_settings_and_shows_the_apis_message(browser, base_url):
    watched = _watched(browser)
    page = watched.page
    page.goto(f"{base_url}/inference?{QUERY}", wait_until="networkidle")
    more = page.get_by_test_id("more-settings")
    assert not more.evaluate("d => d.open")
    body = {"model": "llama3.1-70b", "gpu": "h100-sxm", "tensor_parallel": 3, "num_gpus": 2}
    refused = httpx.post(f"{base_url}/api/v1/inference/memory", json=body)
    assert refused.status_code == 422
    page.fill("#tensor_parallel", "3")
    expect(page.locator("#tensor_parallel-error")).to_have_text(refused.json()["detail"][0]["msg"])
    expect(page.locator("#tensor_parallel")).to_have_attribute("aria-invalid", "true")
    page.fill("#tensor_parallel", "2")
    expect(page.locator("#tensor_parallel-error")).to_have_text("")
    page.evaluate("document.getElementById('gpu_memory_utilization').value = '2';"
                  " document.getElementById('gpu_memory_utilization').dispatchEvent("
                  "new Event('input', {bubbles: true}))")
    expect(page.locator("#gpu_memory_utilization-error")).to_contain_text("<= 1")
    assert more.evaluate("d => d.open")
    watched.clean()
    page.context.close()


def test_the_page_fits_a_phone(browser, base_url, tmp_path):
    assert_fits_a_phone(browser, f"{base_url}/inference?{QUERY}", 2, tmp_path / "inference-390.png")
