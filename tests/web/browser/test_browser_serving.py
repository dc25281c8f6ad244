"""The Serving page in a real browser: the simulator's answer for Llama-3.1-8B on one H100 at 10
requests/s drawn as POST /api/v1/inference/simulate gives it (p50 and p99 latencies against the rate with
the SLOs, the queue and the KV cache over time), the figures its own, a saturating rate said so, a phone's
width, no console error and nothing fetched off the box."""

import httpx
from playwright.sync_api import expect

from app.numbers import sig
from app.web.serving import SWEEP
from tests.support.browser import assert_fits_a_phone, wait_for_charts, watched_at

QUERY = "model=llama3.1-8b&gpu=h100-sxm&rate_per_s=10&requests=400"
BODY = {
    "model": "llama3.1-8b",
    "gpu": "h100-sxm",
    "rate_per_s": 10,
    "requests": 400,
    "prompt_tokens": {"distribution": "lognormal", "mean": 512, "spread": 0.8},
    "output_tokens": {"distribution": "lognormal", "mean": 256, "spread": 0.8},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
    "sweep_rates": [10 * k for k in SWEEP],
}
CHART = "Chart.getChart(document.querySelectorAll('#result canvas')[{}])"
SETS = "{}.data.datasets.map(d => ({{label: d.label, data: d.data}}))"


def test_the_charts_are_the_simulators_answer(browser, base_url, screenshots):
    watched = watched_at(browser, 1280, 900)
    page = watched.page
    page.goto(f"{base_url}/serving?{QUERY}", wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 4)
    response = httpx.post(f"{base_url}/api/v1/inference/simulate", json=BODY, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    expect(page.get_by_test_id("ttft-p99")).to_have_text(
        f"{sig(answer['time_to_first_token']['p99'] * 1e3)} ms"
    )
    expect(page.get_by_test_id("tpot-p50")).to_have_text(
        f"{sig(answer['time_per_output_token']['p50'] * 1e3)} ms"
    )
    expect(page.get_by_test_id("slo-met")).to_have_text("met" if answer["slo_met"] else "missed")
    # TTFT against rate: the sweep's p50 and p99 (ms) and the asked rate's own, in rate order, and the SLO.
    ttft = {s["label"]: s["data"] for s in page.evaluate(SETS.format(CHART.format(0)))}
    points = sorted(
        [*answer["by_rate"], {"rate_per_s": 10, "ttft_p99": answer["time_to_first_token"]["p99"]}],
        key=lambda p: p["rate_per_s"],
    )
    assert ttft["p99"] == [
        {"x": p["rate_per_s"], "y": p["ttft_p99"] * 1e3} for p in points if p["ttft_p99"] is not None
    ]
    assert [p["y"] for p in ttft["SLO 500 ms"]] == [500, 500]
    # The queue and the KV cache over time: the answer's 200 points.
    queue = {s["label"]: s["data"] for s in page.evaluate(SETS.format(CHART.format(2)))}
    pool = answer["pools"][0]
    assert queue["replica running"] == [{"x": q["time_s"], "y": q["running"]} for q in pool["points"]]
    kv = page.evaluate(SETS.format(CHART.format(3)))[0]["data"]
    assert kv == [{"x": q["time_s"], "y": 100 * q["kv_cache_used"]} for q in pool["points"]]
    page.screenshot(path=screenshots / "serving.png", full_page=True)
    watched.clean()
    page.context.close()


def test_a_rate_past_saturation_says_so(browser, base_url):
    watched = watched_at(browser, 1280, 900)
    page = watched.page
    page.goto(
        f"{base_url}/serving?model=llama3.1-8b&gpu=h100-sxm&rate_per_s=300&requests=3000",
        wait_until="networkidle",
    )
    wait_for_charts(page, "#result canvas", 4)
    expect(page.get_by_test_id("saturated")).to_contain_text("Saturated")
    expect(page.get_by_test_id("slo-met")).to_have_text("missed")
    watched.clean()
    page.context.close()


def test_the_page_fits_a_phone(browser, base_url, screenshots):
    assert_fits_a_phone(browser, f"{base_url}/serving?{QUERY}", 4, screenshots / "serving-phone.png")
