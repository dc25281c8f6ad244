"""Pages compute in-process through the API's own request models and service functions:
never an API request, and the same messages as the API for the same input."""

import html
import json
import re

from app.api.services.flops import TransformerRequest
from app.api.services.memory import TrainingMemoryRequest
from app.inputs.schemas import PresetName
from app.web.calculators import CALCULATORS, choices
from tests.support.api import Api


def _request_routes(metrics: str) -> set[str]:
    return set(re.findall(r'tally_http_requests_total\{[^}]*route="([^"]+)"', metrics))


def test_a_page_view_is_not_an_api_request():
    api = Api()
    try:
        # The memory page computes six answers (four ZeRO stages and the largest model), the time
        # page seven, the job-less benchmarks page reads the device and the queue.
        for path in ("/memory", "/ui/time?params=70e9&tokens=15e12&num_gpus=1024", "/benchmarks", "/"):
            assert api.get(path).status_code == 200, path
        routes = _request_routes(api.get("/metrics").text)
    finally:
        api.close()
    assert {"/memory", "/ui/time", "/benchmarks", "/"} <= routes
    assert not [r for r in routes if r.startswith("/api/")], routes


def test_a_page_refuses_with_the_api_message_for_the_same_input(api):
    refused = api.post("/api/v1/memory/training", {"model": "llama2-7b", "batch_size": 0, "seq_len": 4096})
    assert refused.status_code == 422
    message = refused.json()["detail"][0]["msg"]
    page = api.get("/ui/memory?model=llama2-7b&batch_size=0&seq_len=4096").text
    errors = json.loads(html.unescape(re.search(r"data-errors='([^']*)'", page).group(1)))
    assert errors["batch_size"] == message
    # An engine rule, not a schema bound: tensor parallel ranks that do not divide the heads.
    rule = api.post("/api/v1/memory/training", {"model": "llama2-7b", "tensor_parallel": 3})
    assert rule.status_code == 422 and rule.json()["detail"][0]["type"] == "invalid_input"
    assert rule.json()["detail"][0]["msg"] in api.get("/ui/memory?model=llama2-7b&tensor_parallel=3").text


def test_choice_lists_come_from_the_request_models():
    memory = {i.name: i.choices for i in CALCULATORS["memory"].inputs}
    assert memory["model"] == PresetName.__args__ == choices(TrainingMemoryRequest, "model")
    assert memory["zero_stage"] == ("0", "1", "2", "3")  # count(0, 3)
    assert memory["recompute"] == ("none", "selective", "full", "op_selective")  # TrainRecompute
    assert choices(TransformerRequest, "causal") == ("full", "halved")
    formats = {i.name: i.choices for i in CALCULATORS["formats"].inputs}["dtype"]
    assert "bfloat16" in formats and "bf16" not in formats  # names, not their aliases
    assert {i.name: i.choices for i in CALCULATORS["time"].inputs}["mfu"] == ()  # a number or "measured"


def test_every_try_link_answers_without_an_impossible_warning(api):
    """Issue 28, point 4: each page's "Try" examples answer, with no refusal and no warning that
    what they ask is impossible; so does each page as it opens."""
    tried = 0
    for slug in CALCULATORS:
        opened = api.get(f"/{slug}")
        assert opened.status_code == 200 and "impossible" not in opened.text.lower(), slug
        for href in re.findall(r'<p class="examples">Try:(.*?)</p>', opened.text, flags=re.S):
            for link in re.findall(r'href="/([^"?]+)\?([^"]*)"', href):
                page = api.get(f"/ui/{link[0]}?{html.unescape(link[1])}")
                assert page.status_code == 200, link
                assert "impossible" not in page.text.lower(), link
                assert re.search(r"<template data-errors='\{\}'>", page.text), (link, page.text[-500:])
                tried += 1
    assert tried >= 9  # fit 3, inference, scale 3, formats
