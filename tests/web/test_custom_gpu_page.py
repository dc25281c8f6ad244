"""A custom GPU on every page that takes a GPU (issue 28, point 3): the GPU list offers it, its
boxes are in the page (hidden and left out of the form until picked), kept in the URL, sent as
the request's gpu object, and a refused box shows the API's message beside it."""

import html
import json
import re
from urllib.parse import urlencode

import pytest

from app.web import custom_gpu
from app.web.calculators import CALCULATORS

BOXES = {"gpu": "custom", "gpu_name": "RTX 3080 Ti", "gpu_memory": "12GB", "gpu_bandwidth": "912GB/s",
         "gpu_bf16": "68.2T"}
GPU = {"name": "RTX 3080 Ti", "memory_bytes": "12GB", "memory_bandwidth_bytes_per_sec": "912GB/s",
       "peak_flop_per_sec": {"bfloat16": "68.2T"}}
TAKING = sorted(slug for slug, calc in CALCULATORS.items() if calc.takes_gpu)


def _errors(page: str) -> dict:
    found = re.search(r"<template data-errors='([^']*)'>", page)
    return json.loads(html.unescape(found.group(1))) if found else {}


def test_the_pages_that_take_a_gpu():
    assert {"fit", "inference", "memory", "scale", "time"} <= set(TAKING)


@pytest.mark.parametrize("slug", TAKING)
def test_every_gpu_list_offers_a_gpu_of_ones_own(api, slug):
    page = api.get(f"/{slug}").text
    assert '<option value="custom" >a GPU of your own (below)</option>' in page
    fieldset = re.search(r"<fieldset[^>]*data-custom-gpu[^>]*>", page).group(0)
    assert "hidden" in fieldset and "disabled" in fieldset  # not sent, not in the URL
    for box in custom_gpu.NAMES:
        assert f'name="{box}"' in page
    opened = api.get(f"/{slug}?" + urlencode(BOXES)).text
    assert "hidden" not in re.search(r"<fieldset[^>]*data-custom-gpu[^>]*>", opened).group(0)
    assert 'value="912GB/s"' in opened and '<option value="custom" selected>' in opened


def test_the_page_answers_as_the_api_does_for_the_same_gpu(api):
    asked = {"model": "llama3.2-1b", "seq_len": 2048}
    page = api.get("/ui/fit?" + urlencode(asked | BOXES)).text
    answer = api.ok("/api/v1/fit", asked | {"gpu": GPU})
    assert answer["gpu_name"] == "RTX 3080 Ti" and "RTX 3080 Ti" in page
    shown = re.search(r'data-testid="gpu-memory">([^<]*)<', page).group(1)
    assert shown == "1 × 12 GB"
    assert _errors(page) == {}


def test_a_refused_box_shows_the_apis_message_beside_it(api):
    asked = {"model": "gpt2"} | BOXES | {"gpu_memory": "12B", "gpu_bandwidth": ""}
    errors = _errors(api.get("/ui/memory?" + urlencode(asked)).text)
    refused = api.post("/api/v1/memory/training", json={"model": "gpt2", "gpu": GPU | {"memory_bytes": "12B"}})
    assert errors["gpu_memory"] == refused.json()["detail"][0]["msg"]
    assert errors["gpu_bandwidth"] == "Field required"  # left empty: the API asks for it
