"""The model picker, pasted configs and the model pages, over HTTP (issue 13, "Dashboard and
CLI"): presets grouped by family with total and active parameters written as the pages
write numbers; a pasted config.json or inline TransformerConfig computes as the preset it
describes, keeps to the URL, and is refused with the API's message naming the key; the
model page's components sum to the total.

Expected counts are published ones (transformers' own): Mixtral-8x7B 46,702,792,704
parameters, 12,879,925,248 active with top-2; the H100's dense bf16 peak 989.5 TFLOP/s."""

import html
import json
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from app.numbers import amount, sig
from tests.support.hf_configs_moe import MIXTRAL_8X7B
from tests.support.hf_configs_real import LLAMA2_7B, MIXTRAL_INLINE

MIXTRAL_TOTAL, MIXTRAL_ACTIVE = 46_702_792_704, 12_879_925_248
H100_BF16 = 989.5e12
PICKER_PAGES = ("/flops", "/memory", "/time")


def _errors(fragment: str) -> dict[str, str]:
    found = re.search(r"<template data-errors='([^']*)'>", fragment)
    return json.loads(html.unescape(found.group(1))) if found else {}


def _testid(page: str, name: str) -> str:
    found = re.search(rf'data-testid="{name}">([^<]*)<', page)
    assert found, name
    return html.unescape(found.group(1))


def _picker(page: str) -> str:
    return re.search(r'<select id="model".*?</select>', page, re.S).group(0)


def _families(api) -> list[str]:
    """The API's families, in the order its listing first names them."""
    listed = api.get("/api/v1/models").json()["data"]
    return list(dict.fromkeys(m["family"] for m in listed))


# --- the picker ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", PICKER_PAGES)
def test_the_picker_groups_presets_by_family_with_total_and_active(api, path):
    listed = {m["name"]: m for m in api.get("/api/v1/models").json()["data"]}
    assert listed["mixtral-8x7b"]["params"]["total"] == MIXTRAL_TOTAL
    assert listed["mixtral-8x7b"]["params"]["active"] == MIXTRAL_ACTIVE
    select = _picker(api.get(path).text)
    groups = re.findall(r'<optgroup label="([^"]+)"', select)
    assert groups == [*_families(api), "Your own"]
    # Each preset sits in its family's group, once.
    for family, body in re.findall(r'<optgroup label="([^"]+)">(.*?)</optgroup>', select, re.S):
        names = re.findall(r'<option value="([^"]+)"', body)
        if family != "Your own":
            assert names == [n for n, m in listed.items() if m["family"] == family], family
    mixtral = re.search(r'<option value="mixtral-8x7b"[^>]*>([^<]*)<', select).group(1)
    assert mixtral == "mixtral-8x7b (46.7 B total, 12.9 B active)"
    assert mixtral == f"mixtral-8x7b ({amount(MIXTRAL_TOTAL)} total, {amount(MIXTRAL_ACTIVE)} active)"
    # A dense model reads every parameter: one count.
    gpt2 = re.search(r'<option value="gpt2"[^>]*>([^<]*)<', select).group(1)
    assert gpt2 == f"gpt2 ({amount(listed['gpt2']['params']['total'])} params)" and "active" not in gpt2


def test_the_api_says_what_total_and_active_are(api):
    spec = api.get("/openapi.json").json()["paths"]["/api/v1/models"]["get"]
    text = spec["description"]
    assert "params.total" in text and "params.active" in text and "top_k" in text


# --- a pasted config ---------------------------------------------------------------------------------

def _flops(api, query: dict) -> str:
    fragment = api.get("/ui/flops?" + urlencode(query)).text
    assert _errors(fragment) == {}, _errors(fragment)
    return _testid(fragment, "step-flops")


def test_a_pasted_config_json_gives_the_presets_flops(api):
    preset = api.ok("/api/v1/flops/transformer", {"model": "llama2-7b", "seq_len": 4096})["step"]["total"]
    pasted = {"model": "custom", "config": json.dumps(LLAMA2_7B, indent=2), "seq_len": "4096"}
    shown = _flops(api, pasted)
    assert shown == _flops(api, {"model": "llama2-7b", "seq_len": "4096"})
    assert shown == sig(preset)
    fragment = api.get("/ui/flops?" + urlencode(pasted)).text
    assert "the pasted config.json (llama)" in _testid(fragment, "picked")


def test_a_pasted_mixtral_config_json_gives_the_presets_flops(api):
    shape = {"seq_len": "2048", "causal": "halved"}
    pasted = _flops(api, shape | {"model": "custom", "config": json.dumps(MIXTRAL_8X7B)})
    assert pasted == _flops(api, shape | {"model": "mixtral-8x7b"})


def test_an_inline_mixtral_config_gives_the_presets_flops_and_memory(api):
    inline = {"model": "custom", "config": json.dumps(MIXTRAL_INLINE)}
    assert _flops(api, inline) == _flops(api, {"model": "mixtral-8x7b"})
    memory = {"seq_len": "4096", "gpu": "h100-sxm", "zero_stage": "3", "data_parallel": "8"}
    preset = api.get("/ui/memory?" + urlencode(memory | {"model": "mixtral-8x7b"})).text
    pasted = api.get("/ui/memory?" + urlencode(memory | inline)).text
    assert _testid(pasted, "total-gb") == _testid(preset, "total-gb")


def test_the_shared_url_reproduces_the_result(api):
    """The fragment's URL (what the address bar shows) opens the same page and result, and a
    config alone in the URL is the pasted config."""
    query = {"model": "custom", "config": json.dumps(MIXTRAL_INLINE, indent=1), "seq_len": "512"}
    fragment = api.get("/ui/flops?" + urlencode(query))
    shared = fragment.headers["HX-Replace-Url"]
    assert parse_qs(urlsplit(shared).query)["config"] == [query["config"]]
    page = api.get(shared).text
    assert _testid(page, "step-flops") == _testid(fragment.text, "step-flops")
    assert re.search(r'<option value="custom" selected', page)
    assert html.unescape(re.search(r'<textarea id="config"[^>]*>([^<]*)</textarea>', page).group(1)) \
        == query["config"]
    alone = api.get("/flops?" + urlencode({"config": query["config"], "seq_len": "512"})).text
    assert _testid(alone, "step-flops") == _testid(page, "step-flops")


@pytest.mark.parametrize(("config", "named", "said"), [
    ('{"model_type": "llama", "hidden_size": 4096', None, "malformed JSON"),
    ('{"model_type": "llama", "model_type": "llama"}', "model_type", "appears twice"),
    ("[1, 2]", None, "must be a JSON object"),
    ("", None, "paste a config.json"),
    (json.dumps(LLAMA2_7B | {"kv_lora_rank": 512}), "kv_lora_rank", "does not read it"),
    (json.dumps(LLAMA2_7B | {"model_type": "llamma"}), "model_type", "is not one of"),
    (json.dumps(MIXTRAL_INLINE | {"top_k": 9}), "model.top_k", "exceeds n_experts"),
    (json.dumps(MIXTRAL_INLINE | {"n_expertz": 9}), "model.n_expertz", "not permitted"),
])
@pytest.mark.parametrize("path", PICKER_PAGES)
def test_a_bad_config_shows_the_apis_message_naming_the_key(api, path, config, named, said):
    query = {"model": "custom", "config": config, "tokens": "1e12", "gpu": "h100-sxm"}
    fragment = api.get(f"/ui{path}?" + urlencode(query))
    assert fragment.status_code == 200
    shown = _errors(fragment.text)
    assert list(shown) == ["config"], shown
    assert said in shown["config"]
    if named is not None:
        key = named.removeprefix("model.") if path == "/time" else named  # time validates the config alone
        assert shown["config"].startswith(f"{key}: "), shown
    if named and not named.startswith("model.") and config.startswith("{"):
        # The import's own 422 says the same, naming the same key.
        refused = api.post("/api/v1/models/import", content=config,
                           headers={"content-type": "application/json"})
        assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == named
        assert refused.json()["detail"][0]["msg"] in shown["config"]
    assert api.get(f"{path}?" + urlencode(query)).status_code == 200  # the whole page too, never a 500


# --- the time page: a model's active parameters ------------------------------------------------------

def test_the_time_page_takes_a_models_active_parameters(api):
    tokens = 1e12
    fragment = api.get("/ui/time?" + urlencode({"model": "mixtral-8x7b", "tokens": "1e12", "gpu": "h100-sxm",
                                                "params": "70e9"})).text
    days = 6 * MIXTRAL_ACTIVE * tokens / (H100_BF16 * 0.5) / 86_400
    assert _testid(fragment, "days") == f"{days:,.1f}"
    assert f"{MIXTRAL_ACTIVE:,}" in _testid(fragment, "picked-params")
    inline = api.get("/ui/time?" + urlencode({"model": "custom", "config": json.dumps(MIXTRAL_INLINE),
                                              "tokens": "1e12", "gpu": "h100-sxm"})).text
    assert _testid(inline, "days") == f"{days:,.1f}"
    # No model: the parameter count, as before.
    plain = api.get("/ui/time?" + urlencode({"model": "", "params": "70e9", "tokens": "1e12",
                                             "gpu": "h100-sxm"})).text
    assert _testid(plain, "days") == f"{6 * 70e9 * tokens / (H100_BF16 * 0.5) / 86_400:,.1f}"
    unknown = _errors(api.get("/ui/time?model=mixtrl&tokens=1e12&gpu=h100-sxm").text)
    assert list(unknown) == ["model"] and "mixtrl" in unknown["model"]


# --- the FLOPs page: expert and latent components ----------------------------------------------------

@pytest.mark.parametrize(("model", "present", "absent"), [
    ("mixtral-8x7b", {"router", "routed_experts"}, {"shared_experts", "attention_latent", "mlp"}),
    ("deepseek-v3", {"router", "routed_experts", "shared_experts", "attention_latent", "mlp"}, set()),
    ("gpt2", {"mlp"}, {"router", "routed_experts", "shared_experts", "attention_latent"}),
])
def test_the_flops_table_shows_the_non_zero_components(api, model, present, absent):
    answer = api.ok("/api/v1/flops/transformer", {"model": model, "seq_len": 256})
    fragment = api.get("/ui/flops?" + urlencode({"model": model, "seq_len": "256"})).text
    rows = dict(re.findall(r'<tr data-part="([^"]+)"><th scope="row">[^<]*</th><td>([^<]*)</td>', fragment))
    assert present <= set(rows) and not absent & set(rows), rows
    assert set(rows) == {k for k, v in answer["forward"].items() if v}  # total included
    chart = json.loads(html.unescape(re.search(r"data-chart='([^']*)'", fragment).group(1)))
    assert chart["keys"] == [k for k in rows if k != "total"]
    assert sum(chart["forward"]) == answer["forward"]["total"]
    assert f'href="/models/{model}"' in fragment


# --- the model pages ---------------------------------------------------------------------------------

def _rows(page: str) -> dict[str, tuple[int, int]]:
    return {label: (int(total), int(active)) for label, total, active in re.findall(
        r'data-component="([^"]+)" data-total="(\d+)" data-active="(\d+)"', page)}


def test_the_models_page_lists_every_preset_by_family(api):
    page = api.get("/models").text
    assert re.findall(r'<tbody data-family="([^"]+)"', page) == _families(api)
    row = re.search(r'<tr data-model="mixtral-8x7b">.*?</tr>', page, re.S).group(0)
    assert "46.7 B" in row and "12.9 B" in row and 'href="/models/mixtral-8x7b"' in row
    assert '<a href="/models">Models</a>' in page  # the nav


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "gpt2"])
def test_a_model_page_breaks_the_parameters_down_by_component(api, name):
    summary = api.get(f"/api/v1/models/{name}").json()
    params = summary["params"]
    page = api.get(f"/models/{name}").text
    rows = _rows(page)
    assert sum(t for t, _ in rows.values()) == params["total"]
    assert sum(a for _, a in rows.values()) == params["active"]
    assert all(t > 0 for t, _ in rows.values())
    chart = json.loads(html.unescape(re.search(r"data-chart='([^']*)'", page).group(1)))
    assert [p["label"] for p in chart["parts"]] == list(rows)  # one segment per non-zero component
    for warning in summary["warnings"]:
        assert html.escape(warning, quote=False) in page or warning in html.unescape(page)
    assert f'href="/flops?model={name}"' in page
    if name == "mixtral-8x7b":
        assert rows["routed experts"] == (params["routed_experts"], params["routed_experts_active"])
        assert params["total"] == MIXTRAL_TOTAL and params["active"] == MIXTRAL_ACTIVE
        assert "shared experts" not in rows and "dense MLP" not in rows


def test_a_pasted_config_has_a_model_page(api):
    preset = _rows(api.get("/models/mixtral-8x7b").text)
    page = api.get("/models/custom?" + urlencode({"config": json.dumps(MIXTRAL_INLINE)}))
    assert page.status_code == 200 and _rows(page.text) == preset
    assert _testid(page.text, "total") == amount(MIXTRAL_TOTAL)
    refused = api.get("/models/custom?" + urlencode({"config": json.dumps(MIXTRAL_INLINE | {"top_k": 9})}))
    assert refused.status_code == 422 and _testid(refused.text, "refusal").startswith("top_k: ")
    imported = api.get("/models/custom?" + urlencode({"config": json.dumps(LLAMA2_7B)})).text
    assert _rows(imported) == _rows(api.get("/models/llama2-7b").text)
    missing = api.get("/models/llama9")
    assert missing.status_code == 404 and "llama9" in _testid(missing.text, "refusal")
