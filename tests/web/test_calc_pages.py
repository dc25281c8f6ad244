"""The calculator pages agree with the API: the same defaults, the same answers, every refusal
shown beside a field the page has (or in a line above the result), numbers as a person reads
them. Issue 12: what a new user trips over."""

import html
import json
import re
from urllib.parse import urlencode

import pytest

from app.web.calculators import CALCULATORS
from tests.support.api import assert_names_field
from tests.support.devices import H100_REPORTED_BYTES

TIME = "/api/v1/time/training"


def _text(value) -> str:
    """A default as a form field holds it (independent of the page's own converter): a list as
    the comma-separated values a person types (the Scale page's ZeRO stages: "0, 1, 2, 3")."""
    if isinstance(value, list):
        return ", ".join(_text(v) for v in value)
    return {True: "true", False: "false"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def _errors(fragment: str) -> dict[str, str]:
    found = re.search(r"<template data-errors='([^']*)'>", fragment)
    return json.loads(html.unescape(found.group(1))) if found else {}


def _testid(page: str, name: str) -> str:
    found = re.search(rf'data-testid="{name}">([^<]*)<', page)
    assert found, name
    return html.unescape(found.group(1))


@pytest.mark.parametrize("slug", list(CALCULATORS))
def test_page_defaults_are_the_request_models_defaults(slug):
    """One source: an input whose model field has a default opens on it (the memory page once
    opened on recompute "selective", ZeRO 1 and 8 ranks while the API used none, 0 and 1)."""
    calc = CALCULATORS[slug]
    checked = 0
    for field in calc.inputs:
        info = calc.request.model_fields[field.name]
        if not info.is_required() and info.default is not None:
            assert field.default == _text(info.default), (slug, field.name)
            checked += 1
    assert checked or slug == "formats"  # formats has two required fields and nothing else


def test_memory_page_and_api_answer_alike_with_defaults_left_out(make_api):
    """Llama-3-8B on one H100 at 4k tokens: whatever the API's defaults are, the page's are them."""
    api = make_api()
    given = {"model": "llama3-8b", "gpu": "h100-sxm", "seq_len": 4096}
    answer = api.ok("/api/v1/memory/training", given)
    page = api.get("/memory?" + urlencode(given)).text
    assert _testid(page, "total-gb") == f"{answer['total'] / 1e9:,.1f} GB"


def test_a_page_answer_says_which_defaults_it_applied(make_api):
    """As the API's answer does: the fragment of a form that leaves fields out lists them with
    the values used, the same dict the API returns."""
    api = make_api()
    given = {"model": "llama3-8b", "gpu": "h100-sxm", "seq_len": 4096}
    applied = api.ok("/api/v1/memory/training", given)["defaults_applied"]
    assert applied["recompute"] == "selective" and applied["zero_stage"] == 0
    shown = _testid(api.get("/ui/memory?" + urlencode(given)).text.replace("\n", " "), "defaults-applied")
    assert "recompute selective" in shown and "zero stage 0" in shown and "data parallel 1" in shown
    assert "seq len" not in shown  # given
    assert "sequence parallel true" in shown and "None" not in shown  # a null default shaped nothing


def test_time_page_and_api_answer_alike_with_defaults_left_out(make_api):
    api = make_api()
    given = {"params": "70e9", "tokens": "15e12", "gpu": "h100-sxm"}
    answer = api.ok(TIME, {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm"})
    # One H100 at MFU 0.5 (the default): 6 N D / (989.5e12 / s x 0.5), in days.
    assert answer["days"] == pytest.approx(6 * 70e9 * 15e12 / (989.5e12 * 0.5) / 86400, rel=1e-12)
    page = api.get("/time?" + urlencode(given)).text
    assert _testid(page, "days") == f"{answer['days']:,.1f}"


def test_an_mfu_left_out_is_reported_as_the_default(api):
    body = {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm", "num_gpus": 1024}
    left_out = api.ok(TIME, body)
    assert left_out["mfu"] == 0.5 and left_out["mfu_source"] == "default"
    assert api.ok(TIME, body | {"mfu": 0.5})["mfu_source"] == "given"


def test_cost_carries_its_currency(api):
    body = {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm", "num_gpus": 1024, "mfu": 0.5,
            "price_per_gpu_hour": 2.0}
    # GPU-hours: 6.3e24 FLOPs at 989.5 TFLOP/s x 0.5 per GPU, in hours; at 2 a GPU-hour.
    cost = 6 * 70e9 * 15e12 / (989.5e12 * 0.5) / 3600 * 2.0
    assert api.ok(TIME, body)["currency"] == "USD"
    euros = api.ok(TIME, body | {"currency": "EUR"})
    assert euros["currency"] == "EUR" and euros["cost"] == pytest.approx(cost, rel=1e-12)
    assert_names_field(api.post(TIME, body | {"currency": "euros"}), "currency")
    page = api.get("/ui/time?" + urlencode({k: str(v) for k, v in body.items()} | {"currency": "EUR"})).text
    assert _testid(page, "cost") == f"EUR {cost:,.0f}"


def test_a_missing_half_of_params_and_tokens_is_named(api):
    assert_names_field(api.post(TIME, {"tokens": 15e12, "gpu": "h100-sxm"}), "params")
    assert_names_field(api.post(TIME, {"params": 70e9, "gpu": "h100-sxm"}), "tokens")
    emptied = _errors(api.get("/ui/time?params=&tokens=15e12&gpu=h100-sxm").text)
    assert list(emptied) == ["params"]
    assert list(_errors(api.get("/ui/time?params=70e9&tokens=&gpu=h100-sxm").text)) == ["tokens"]


def _defaults(slug: str) -> dict[str, str]:
    return {i.name: i.default for i in CALCULATORS[slug].inputs}


CASES = [(slug, i.name, bad)
         for slug, calc in CALCULATORS.items() for i in calc.inputs for bad in ("", "abc")]


@pytest.mark.parametrize(("slug", "name", "bad"), CASES)
def test_every_input_emptied_or_garbled_computes_or_says_why(api, slug, name, bad):
    """Never a blank result: an answer, a message beside an input the page has, or, for a
    field the page lacks, a line above the result."""
    fragment = api.get(f"/ui/{slug}?" + urlencode(_defaults(slug) | {name: bad})).text
    errors = _errors(fragment)
    names = {i.name for i in CALCULATORS[slug].inputs}
    answered = 'class="figures"' in fragment
    refusal = 'data-testid="refusal"' in fragment
    assert answered or errors or refusal, fragment
    assert set(errors) <= names or refusal, errors
    if bad == "abc" and not answered:
        assert name in errors or refusal, errors


def test_the_formats_page_takes_what_the_api_takes(api):
    """The value goes as a string, read exactly: 1e-400 is below float32's smallest subnormal
    (2**-149, about 1.4e-45) so it underflows, 1e999 is above its max (about 3.4e38) so it
    overflows; "abc" gets the API's own message."""
    for value, verdict in (("1e-400", "underflow"), ("1e999", "overflow")):
        page = api.get("/ui/formats?" + urlencode({"value": value, "dtype": "float32"})).text
        assert _testid(page, "range") == verdict, value
        assert api.ok("/api/v1/dtypes/encode", {"value": value, "dtype": "float32"})[verdict]
    refused = api.post("/api/v1/dtypes/encode", {"value": "abc", "dtype": "float32"})
    shown = _errors(api.get("/ui/formats?value=abc&dtype=float32").text)["value"]
    assert "decimal" in shown and shown in refused.json()["message"]


def test_the_course_example_opens_in_float32(api):
    page = api.get("/formats").text
    link = r'href="/formats\?value=0.15625&(amp;)?dtype=float32" data-testid="example-0.15625"'
    assert re.search(link, page)
    assert re.search(r'<option value="float32" selected', page)  # the course starts from float32


def test_numbers_read_as_a_person_reads_them(api):
    """At the defaults: one H100 (the 85.06e9 bytes it reports) at 16 bytes per parameter (bf16
    mixed with AdamW) holds 5.32e9 parameters."""
    memory = api.get("/memory").text
    assert _testid(memory, "max-params") == f"{H100_REPORTED_BYTES / 16 / 1e9:.1f} B" == "5.3 B"
    assert "GiB" not in memory
    assert _testid(api.get("/time?params=70e9&tokens=15e12").text, "flops") == "6.30 × 10²⁴"
    for slug in CALCULATORS:
        page = api.get(f"/{slug}").text
        assert not re.search(r"\de\+\d", page), slug


def test_a_measured_mfu_not_yet_measured_offers_the_probe(make_api):
    api = make_api()
    fragment = api.get("/ui/time?params=70e9&tokens=15e12&gpu=h100-sxm&dtype=bfloat16&mfu=measured").text
    assert "train_step" in _errors(fragment)["mfu"] and "bf16_autocast" in _errors(fragment)["mfu"]
    button = re.search(r"hx-post=\"/ui/benchmarks/launch\" hx-vals='([^']*)'", fragment)
    assert button and json.loads(html.unescape(button.group(1))) == {"probe": "train_step",
                                                                     "precision": "bf16_autocast"}
    fp32 = api.get("/ui/time?params=70e9&tokens=15e12&gpu=h100-sxm&dtype=float32&mfu=measured").text
    assert "&#34;precision&#34;: &#34;fp32&#34;" in fp32 or '"precision": "fp32"' in html.unescape(fp32)


def test_the_memory_page_shows_the_steps_phases_and_charts_their_peak(make_api):
    """The total is the largest of the step's phases (app/accounting/training/phases.py): the page
    lists each phase with the API's bytes, marks the peak, and each chart bar's segments add up to
    that bar's total, whichever phase holds it. GPT-2 (tied embeddings, a 50,257-token vocabulary)
    at 8 tokens: the head's and the embedding's weight gradients held together at the end of
    backward outgrow the start of backward's few activations, so the peak is that later moment."""
    api = make_api()
    given = {"model": "gpt2", "gpu": "h100-sxm", "seq_len": 8, "batch_size": 1}
    answer = api.ok("/api/v1/memory/training", given)
    fragment = api.get("/ui/memory?" + urlencode(given)).text
    phases = re.search(r'data-testid="memory-phases">(.*?)</table>', fragment, re.S).group(1)
    for phase, n in answer["phases"].items():
        assert f"{n:,}" in phases, phase
    assert f'{answer["peak_phase"].replace("_", " ")} (the peak)' in phases
    assert answer["total"] == max(answer["phases"].values()) and answer["peak_phase"] != "start_of_backward"
    chart = json.loads(html.unescape(re.search(r"data-chart='([^']*memory_stack[^']*)'", fragment).group(1)))
    for bar in chart["bars"]:
        assert sum(bar[k] for k in chart["kinds"]) == pytest.approx(bar["total"], rel=1e-9)
