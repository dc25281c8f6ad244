"""The Scale page in a real browser: the form filled for Llama-3-8B on 64 H100s, every layout the
search evaluated drawn as a point (bytes per GPU against step time, the numbers of POST
/api/v1/plan/training for the same body), a point's tooltip naming its layout, the fastest
layouts' step stacked by kind, nothing fitting said so, a refused limit beside its input, the
collective calculator, a phone's width, no console error and nothing fetched off the box."""

import httpx
import pytest
from playwright.sync_api import expect

from app.numbers import duration, gb, sig
from tests.support.browser import assert_fits_a_phone, wait_for_charts, watched_at
from tests.support.devices import H100_REPORTED_BYTES

ASKED = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 64, "global_batch_sequences": 256,
         "seq_len": 4096}
SCATTER = "Chart.getChart(document.querySelector('#result canvas'))"
BARS = "Chart.getChart(document.querySelectorAll('#result canvas')[1])"
# A function, not an expression: polling an expression evaluates a string, which the CSP refuses.
DRAWN_FOR = """(evaluated) => {
  const canvases = [...document.querySelectorAll('#result canvas')];
  if (canvases.length !== 2 || !canvases.every(c => Chart.getChart(c) !== undefined)) return false;
  const spec = JSON.parse(canvases[0].dataset.chart);
  return spec.fits.length + spec.over.length === evaluated;
}"""
SETS = "{}.data.datasets.map(d => ({{label: d.label, type: d.type || 'scatter', data: d.data}}))"


def _plan(base_url, body: dict) -> dict:
    # A search of thousands of layouts: seconds on a loaded two-core box, so httpx's 5 s is too short.
    response = httpx.post(f"{base_url}/api/v1/plan/training", json=body | {"include_points": True}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_llama3_8b_on_64_h100s_every_layout_and_the_fastest(browser, base_url, screenshots):
    watched = watched_at(browser, 1280, 900)
    page = watched.page
    # Opened on something else, then filled in as a person would: the form asks, htmx answers.
    page.goto(f"{base_url}/scale?model=gpt2&gpu=h100-sxm&num_gpus=8&global_batch_sequences=64&seq_len=1024",
              wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 2)
    answer = _plan(base_url, ASKED)
    page.select_option("#model", ASKED["model"])
    page.fill("#num_gpus", "64")
    page.fill("#global_batch_sequences", "256")
    page.fill("#seq_len", "4096")
    page.wait_for_function(DRAWN_FOR, arg=answer["evaluated"])
    assert "model=llama3-8b" in page.url and "num_gpus=64" in page.url  # the result is a link
    best = answer["best"][0]
    expect(page.get_by_test_id("step")).to_have_text(duration(best["step_seconds"]))
    expect(page.get_by_test_id("fitting")).to_have_text(f"{answer['fitting']:,} of {answer['evaluated']:,}")
    expect(page.get_by_test_id("step-1")).to_have_text(duration(best["step_seconds"]))
    # Energy per token: the step on 64 GPUs at 700 W x PUE 1.1, over 256 x 4096 tokens.
    per_token = best["step_seconds"] * 64 * 700 * 1.1 / (256 * 4096)
    assert best["energy"]["joules_per_token"] == pytest.approx(per_token, rel=1e-12)
    expect(page.get_by_test_id("energy-1")).to_have_text(sig(per_token))
    # The scatter: one point per evaluated layout at (seconds, GB), those that fit apart, the GPU's
    # memory (what an H100 reports) a line, the chosen layout ringed; both axes logarithmic.
    sets = {s["label"]: s for s in page.evaluate(SETS.format(SCATTER))}
    drawn = sorted((p["x"], p["y"], p["label"]) for p in sets["fits"]["data"] + sets["does not fit"]["data"])
    assert drawn == sorted((p["step_seconds"], p["memory_bytes"] / 1e9, p["label"]) for p in answer["points"])
    assert len(sets["fits"]["data"]) == answer["fitting"]
    (line,) = [s for s in sets.values() if s["type"] == "line"]
    assert [p["y"] for p in line["data"]] == [H100_REPORTED_BYTES / 1e9] * 2
    (chosen,) = [s for s in sets.values() if s["label"].startswith("chosen")]
    ring = chosen["data"][0]
    assert (ring["x"], ring["y"]) == (best["step_seconds"], best["memory_bytes"] / 1e9)
    assert page.evaluate(f"[{SCATTER}.options.scales.x.type, {SCATTER}.options.scales.y.type]") == [
        "logarithmic", "logarithmic"]
    # Hovering the ring shows the chosen layout's name and figures.
    page.locator("#result canvas").first.scroll_into_view_if_needed()  # the mouse hovers only what is shown
    box = page.locator("#result canvas").first.bounding_box()
    xy = page.evaluate(f"(() => {{ const p = {SCATTER}.getDatasetMeta(0).data[0]; return [p.x, p.y]; }})()")
    page.mouse.move(box["x"] + xy[0], box["y"] + xy[1])
    page.wait_for_function(f"() => {SCATTER}.tooltip.opacity > 0")
    lines = page.evaluate(f"{SCATTER}.tooltip.body.flatMap(b => b.lines)")
    assert any(ring["label"] in line_ for line_ in lines), lines
    # The bars: the listed layouts' seconds by kind, each summing to its step.
    bar_sets = page.evaluate(f"{BARS}.data.datasets.map(d => d.data)")
    for i, s in enumerate(answer["best"]):
        assert abs(sum(d[i] for d in bar_sets) - s["step_seconds"]) < 1e-9 * s["step_seconds"]
    assert page.evaluate(f"{BARS}.options.indexAxis") == "y"  # horizontal
    page.mouse.move(0, 0)
    page.screenshot(path=screenshots / "scale.png", full_page=True)
    watched.clean()
    page.context.close()


def test_nothing_fitting_and_a_refused_limit(browser, base_url):
    watched = watched_at(browser, 1280, 900)
    page = watched.page
    one_node = ASKED | {"model": "llama3-70b", "num_gpus": 8, "global_batch_sequences": 64}
    page.goto(f"{base_url}/scale?model=llama3-70b&gpu=h100-sxm&num_gpus=8&global_batch_sequences=64"
              "&seq_len=4096", wait_until="networkidle")
    wait_for_charts(page, "#result canvas", 2)
    answer = _plan(base_url, one_node)
    expect(page.get_by_test_id("nothing-fits")).to_contain_text("No layout fits")
    expect(page.get_by_test_id("least-memory")).to_have_text(gb(answer["least_memory"]["memory_bytes"]))
    refused = httpx.post(f"{base_url}/api/v1/plan/training",
                         json=one_node | {"limits": {"zero_stage": [1, 7]}}, timeout=120)
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "limits.zero_stage.1"
    page.fill("#zero_stage", "1, 7")
    expect(page.locator("#zero_stage-error")).to_have_text(refused.json()["detail"][0]["msg"])
    expect(page.locator("#zero_stage")).to_have_attribute("aria-invalid", "true")
    page.fill("#zero_stage", "0, 1")
    # The message clears when the new search answers: seconds of work on a loaded box.
    expect(page.locator("#zero_stage-error")).to_have_text("", timeout=60_000)
    wait_for_charts(page, "#result canvas", 2)
    watched.clean()
    page.context.close()


def test_the_collective_calculator(browser, base_url, screenshots):
    watched = watched_at(browser, 1280, 900)
    page = watched.page
    page.goto(f"{base_url}/scale", wait_until="networkidle")
    page.get_by_test_id("collective-link").click()
    page.wait_for_url("**/scale/collective")
    page.select_option("#collective", "all_gather")
    page.fill("#ranks", "256")
    body = {"collective": "all_gather", "bytes": "1GB", "ranks": 256, "gpus_per_node": 8, "gpu": "h100-sxm"}
    response = httpx.post(f"{base_url}/api/v1/comm/collective", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    expect(page.get_by_test_id("nodes")).to_have_text("32 × 8")
    expect(page.get_by_test_id("seconds")).to_have_text(duration(answer["seconds"]))
    for level in answer["levels"]:
        expect(page.get_by_test_id(f"level-seconds-{level['name']}")).to_have_text(duration(level["seconds"]))
    assert "collective=all_gather" in page.url and "ranks=256" in page.url
    page.screenshot(path=screenshots / "scale-collective.png", full_page=True)
    watched.clean()
    page.context.close()


def test_the_page_fits_a_phone(browser, base_url, tmp_path):
    assert_fits_a_phone(browser, f"{base_url}/scale", 2, tmp_path / "scale-390.png")
