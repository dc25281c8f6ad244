"""The model picker and the model pages in a real browser (issue 13): the picker groups the
presets by family and names their total and active parameters; picking "a pasted config"
opens the config box, and a pasted config computes what its preset does, keeps to the
address bar and reopens from it; a bad one shows the API's message beside the box; the
model page charts every non-zero component, all parameters against the active ones.

Published counts (transformers' own): Mixtral-8x7B 46,702,792,704 parameters, 12,879,925,248
active with top-2."""

import json

import httpx
from playwright.sync_api import expect

from app.numbers import amount
from tests.support.browser import REPORT_CSP, Watched, wait_for_charts
from tests.support.hf_configs_real import LLAMA2_7B, MIXTRAL_INLINE

MIXTRAL_TOTAL, MIXTRAL_ACTIVE = 46_702_792_704, 12_879_925_248
CHART = "Chart.getChart(document.querySelector('#result canvas'))"
PAGE_CHART = "Chart.getChart(document.querySelector('figure canvas'))"


def _watched(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(REPORT_CSP)
    return Watched(context.new_page())


def test_the_picker_groups_by_family_and_names_total_and_active(browser, base_url, tmp_path):
    listed = httpx.get(base_url + "/api/v1/models").json()["data"]
    families = list(dict.fromkeys(m["family"] for m in listed))
    watched = _watched(browser)
    page = watched.page
    page.goto(base_url + "/flops?model=mixtral-8x7b", wait_until="networkidle")
    groups = page.eval_on_selector_all("#model optgroup", "gs => gs.map(g => g.label)")
    assert groups == [*families, "Your own"]
    in_mixtral = page.eval_on_selector_all("#model optgroup[label='Mixtral'] option",
                                           "os => os.map(o => o.value)")
    assert in_mixtral == [m["name"] for m in listed if m["family"] == "Mixtral"]
    shown = page.eval_on_selector("#model option:checked", "o => o.textContent")
    assert shown == f"mixtral-8x7b ({amount(MIXTRAL_TOTAL)} total, {amount(MIXTRAL_ACTIVE)} active)"
    assert shown == "mixtral-8x7b (46.7 B total, 12.9 B active)"
    # The config box is hidden (and not sent) until "a pasted config" is picked.
    expect(page.locator("#config")).to_be_hidden()
    wait_for_charts(page, "#result canvas", 1)
    labels = page.evaluate(f"{CHART}.data.labels")
    assert "router" in labels and "routed experts" in labels and "shared experts" not in labels
    assert "attention latent" not in labels and "dense mlp" not in labels
    page.screenshot(path=tmp_path / "i13-flops-mixtral.png", full_page=True)
    watched.clean()
    page.context.close()


def test_a_pasted_config_computes_as_its_preset_and_the_link_reopens_it(browser, base_url, tmp_path):
    watched = _watched(browser)
    page = watched.page
    page.goto(base_url + "/flops?model=llama2-7b&seq_len=2048", wait_until="networkidle")
    preset = page.get_by_test_id("step-flops").text_content()
    page.select_option("#model", "custom")
    expect(page.locator("#config")).to_be_visible()
    page.fill("#config", json.dumps(LLAMA2_7B, indent=2))
    expect(page.get_by_test_id("picked")).to_contain_text("the pasted config.json (llama)")
    expect(page.get_by_test_id("step-flops")).to_have_text(preset)
    assert "model=custom" in page.url and "config=" in page.url  # the result is a link
    shared = page.url
    page.screenshot(path=tmp_path / "i13-flops-pasted.png", full_page=True)
    again = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    again.goto(shared, wait_until="networkidle")
    expect(again.get_by_test_id("step-flops")).to_have_text(preset)
    assert again.input_value("#config") == json.dumps(LLAMA2_7B, indent=2)
    assert again.eval_on_selector("#model", "s => s.value") == "custom"
    again.context.close()
    # Back to a preset: the box hides, and the URL drops the config.
    page.select_option("#model", "gpt2")
    page.wait_for_function("() => !location.search.includes('config=')")
    expect(page.locator("#config")).to_be_hidden()
    watched.clean()
    page.context.close()


def test_a_bad_config_shows_the_message_naming_the_key(browser, base_url, tmp_path):
    watched = _watched(browser)
    page = watched.page
    page.goto(base_url + "/memory?model=custom", wait_until="networkidle")
    expect(page.locator("#config-error")).to_contain_text("paste a config.json")
    page.fill("#config", json.dumps(LLAMA2_7B | {"kv_lora_rank": 512}))
    expect(page.locator("#config-error")).to_contain_text("kv_lora_rank: changes the parameter count")
    assert page.get_attribute("#config", "aria-invalid") == "true"
    page.fill("#config", json.dumps(MIXTRAL_INLINE | {"top_k": 9}))
    expect(page.locator("#config-error")).to_contain_text("model.top_k: 9 exceeds n_experts (8)")
    page.fill("#config", '{"n_layers": 2,')
    expect(page.locator("#config-error")).to_contain_text("malformed JSON")
    page.screenshot(path=tmp_path / "i13-memory-bad-config.png", full_page=True)
    page.fill("#config", json.dumps(MIXTRAL_INLINE))
    expect(page.locator("#config-error")).to_have_text("")
    expect(page.get_by_test_id("total-gb")).to_be_visible()
    watched.clean()
    page.context.close()


def test_the_time_page_reads_a_models_active_parameters(browser, base_url, tmp_path):
    watched = _watched(browser)
    page = watched.page
    page.goto(base_url + "/time?tokens=1e12&gpu=h100-sxm", wait_until="networkidle")
    expect(page.locator("#params")).to_be_visible()
    page.select_option("#model", "mixtral-8x7b")
    expect(page.get_by_test_id("picked-params")).to_contain_text(f"{MIXTRAL_ACTIVE:,}")
    expect(page.locator("#params")).to_be_hidden()
    days = 6 * MIXTRAL_ACTIVE * 1e12 / (989.5e12 * 0.5) / 86_400
    expect(page.get_by_test_id("days")).to_have_text(f"{days:,.1f}")
    assert "params=" not in page.url and "model=mixtral-8x7b" in page.url
    page.screenshot(path=tmp_path / "i13-time-model.png", full_page=True)
    watched.clean()
    page.context.close()


def test_the_model_page_charts_each_component_total_against_active(browser, base_url, tmp_path):
    summary = httpx.get(base_url + "/api/v1/models/deepseek-v3").json()
    params = summary["params"]
    watched = _watched(browser)
    page = watched.page
    page.goto(base_url + "/flops?model=deepseek-v3", wait_until="networkidle")
    page.click("[data-testid=model-page]")
    page.wait_for_url("**/models/deepseek-v3")
    wait_for_charts(page, "figure canvas", 1)
    sets = page.evaluate(f"{PAGE_CHART}.data.datasets.map(d => ({{label: d.label, data: d.data}}))")
    assert page.evaluate(f"{PAGE_CHART}.data.labels") == ["all parameters", "active per token"]
    assert sum(s["data"][0] for s in sets) == params["total"]
    assert sum(s["data"][1] for s in sets) == params["active"]
    assert all(s["data"][0] > 0 for s in sets)
    labels = [s["label"] for s in sets]
    assert labels == ["embeddings", "attention", "router", "routed experts", "shared experts", "dense MLP",
                      "norms", "head"]
    routed = sets[labels.index("routed experts")]["data"]
    assert routed == [params["routed_experts"], params["routed_experts_active"]]
    # Ticks as the pages write counts (600 B), never 6e11.
    ticks = page.evaluate(f"{PAGE_CHART}.scales.x.ticks.map(t => t.label)")
    assert ticks and all("e+" not in t for t in ticks) and any(t.endswith(" B") for t in ticks), ticks
    expect(page.get_by_test_id("warnings")).to_contain_text("score-correction bias")
    page.screenshot(path=tmp_path / "i13-model-deepseek.png", full_page=True)
    page.goto(base_url + "/models", wait_until="networkidle")
    page.screenshot(path=tmp_path / "i13-models.png", full_page=True)
    watched.clean()
    page.context.close()


def test_a_pasted_config_opens_on_its_model_page(browser, base_url, tmp_path):
    watched = _watched(browser)
    page = watched.page
    page.goto(base_url + "/models", wait_until="networkidle")
    page.fill("#config", json.dumps(MIXTRAL_INLINE))
    page.click("form.paste button")
    page.wait_for_url("**/models/custom?config=*")
    wait_for_charts(page, "figure canvas", 1)
    expect(page.get_by_test_id("total")).to_have_text(amount(MIXTRAL_TOTAL))
    expect(page.get_by_test_id("active")).to_have_text(amount(MIXTRAL_ACTIVE))
    page.screenshot(path=tmp_path / "i13-model-custom.png", full_page=True)
    watched.clean()
    page.context.close()
