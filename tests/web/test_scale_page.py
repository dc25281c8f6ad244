"""The Scale page (issue 16) answers as POST /api/v1/plan/training does for the same inputs: its
figures, table, refusal counts and charts are the answer's own numbers; the search's limits, flat
on the form, reach the request's `limits`; nothing fitting says so with the closest layout; every
refusal sits beside the field the API names. And /scale/collective answers as
POST /api/v1/comm/collective does, checked against a ring all-reduce worked by hand."""

import html
import json
import re
from urllib.parse import urlencode

import pytest

from app.numbers import amount, duration, gb, percent, sig
from tests.support.devices import H100_REPORTED_BYTES

PLAN = "/api/v1/plan/training"
COLLECTIVE = "/api/v1/comm/collective"
# The page's opening question: Llama-3-8B on 8 HGX H100 nodes, 256 sequences of 4,096 tokens.
ASKED = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 64, "global_batch_sequences": 256,
         "seq_len": 4096}
# Llama-3-70B's 70.6 B parameters on one node: at 16 bytes each (bf16 weights and gradients,
# fp32 Adam moments and master weights) 1.13 TB of state, 141 GB per GPU of 8 even fully sharded.
ONE_NODE = {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 8, "global_batch_sequences": 64,
            "seq_len": 4096}


def _fragment(api, form: dict, path: str = "/ui/scale") -> str:
    response = api.get(path + "?" + urlencode({k: str(v) for k, v in form.items()}))
    assert response.status_code == 200
    return response.text


def _testid(page: str, name: str) -> str:
    found = re.search(rf'data-testid="{re.escape(name)}"[^>]*>([^<]*)<', page)
    assert found, name
    return " ".join(html.unescape(found.group(1)).split())


def _errors(page: str) -> dict[str, str]:
    found = re.search(r"<template data-errors='([^']*)'>", page)
    return json.loads(html.unescape(found.group(1))) if found else {}


def _charts(page: str) -> dict[str, dict]:
    specs = [json.loads(html.unescape(s)) for s in re.findall(r"data-chart='([^']*)'", page)]
    return {s["type"]: s for s in specs}


def _plan(api, body: dict) -> dict:
    return api.ok(PLAN, body | {"include_points": True})


def _rows_shown(page: str, answer: dict) -> None:
    """Each listed layout's row holds the answer's figures, written by the pages' rules."""
    for n, s in enumerate(answer["best"], start=1):
        lo = s["layout"]
        assert _testid(page, f"step-{n}") == duration(s["step_seconds"])
        assert _testid(page, f"tokens-{n}") == amount(s["tokens_per_sec"])
        assert _testid(page, f"mfu-{n}") == percent(s["mfu"])
        assert _testid(page, f"hfu-{n}") == percent(s["hfu"])
        assert _testid(page, f"memory-{n}") == f"{s['memory_bytes'] / 1e9:.1f}"
        assert _testid(page, f"micro-{n}") == f"{lo['micro_batch']} × {lo['micro_batches']}"
        assert _testid(page, f"dp-total-{n}") == duration(s["breakdown"]["data_parallel_total"])
        assert _testid(page, f"fits-{n}") == "yes"
    assert f'data-testid="layout-{len(answer["best"]) + 1}"' not in page


def test_the_page_opens_on_llama3_8b_on_64_h100s(api):
    page = api.get("/scale").text
    assert "<h1>Scale</h1>" in page
    assert re.search(r'<option value="llama3-8b" selected', page)
    assert re.search(r'<option value="h100-sxm" selected', page.split('id="gpu"')[1])
    for name in ("num_gpus", "gpus_per_node", "global_batch_sequences", "global_batch_tokens", "seq_len",
                 "precision", "optimizer", "compute_efficiency", "zero_stage", "recompute",
                 "allow_tensor_parallel_across_nodes", "tensor_parallel", "micro_batch", "config"):
        assert f'id="{name}"' in page, name
    answer = _plan(api, ASKED)
    best = answer["best"][0]
    assert _testid(page, "step") == duration(best["step_seconds"])
    assert _testid(page, "tokens") == amount(best["tokens_per_sec"])
    assert _testid(page, "mfu") == percent(best["mfu"])
    assert _testid(page, "memory") == gb(best["memory_bytes"])
    assert _testid(page, "fitting") == f"{answer['fitting']:,} of {answer['evaluated']:,}"
    assert _testid(page, "cluster") == "8 × 8"  # 64 GPUs on HGX boards of 8
    _rows_shown(page, answer)
    assert len(answer["best"]) == 5  # top_k's default
    for key, count in answer["refused"].items():
        row = page.split(f'data-testid="refused-{key}"')[1].split("</tr>")[0]
        assert f"<td>{count:,}</td>" in row and answer["refusal_reasons"][key] in html.unescape(row)


def test_the_scatter_is_every_evaluated_layout(api):
    page = _fragment(api, ASKED)
    answer = _plan(api, ASKED)
    scatter = _charts(page)["layout_scatter"]
    assert len(scatter["fits"]) == answer["fitting"]
    assert len(scatter["fits"]) + len(scatter["over"]) == answer["evaluated"] == len(answer["points"])
    drawn = {(p["label"], p["x"], p["y"]) for p in scatter["fits"] + scatter["over"]}
    assert drawn == {(p["label"], p["step_seconds"], p["memory_bytes"] / 1e9) for p in answer["points"]}
    assert {p["label"] for p in scatter["fits"]} == {p["label"] for p in answer["points"] if p["fits"]}
    assert scatter["memory_gb"] == H100_REPORTED_BYTES / 1e9  # what an H100 reports, not the datasheet's 80 GB
    best = answer["best"][0]
    chosen = scatter["chosen"]
    assert (chosen["x"], chosen["y"]) == (best["step_seconds"], best["memory_bytes"] / 1e9)
    # The chosen layout is one of the points, named as the answer names it.
    where = (best["step_seconds"], best["memory_bytes"], True)
    at_best = {p["label"] for p in answer["points"]
               if (p["step_seconds"], p["memory_bytes"], p["fits"]) == where}
    assert chosen["label"].startswith("#1: ") and chosen["label"].removeprefix("#1: ") in at_best


def test_the_bars_stack_each_listed_layouts_step(api):
    """Compute (its recompute apart), TP, EP, PP sends, bubble and exposed DP sum to the step."""
    answer = _plan(api, ASKED | {"model": "llama3-70b", "num_gpus": 1024, "global_batch_sequences": 1024})
    page = _fragment(api, ASKED | {"model": "llama3-70b", "num_gpus": 1024, "global_batch_sequences": 1024})
    bars = _charts(page)["step_bars"]
    assert [b["label"] for b in bars["bars"]] == [f"#{i + 1}" for i in range(len(answer["best"]))]
    for bar, s in zip(bars["bars"], answer["best"], strict=True):
        b = s["breakdown"]
        assert bar["compute"] == pytest.approx(b["compute"] - b["recompute"], rel=1e-12)
        assert bar["recompute"] == b["recompute"]
        exposed = ("tensor_parallel", "expert_parallel", "pipeline_p2p", "pipeline_bubble", "data_parallel")
        assert all(bar[k] == b[k] for k in exposed)
        assert sum(bar[k] for k in bars["kinds"]) == pytest.approx(s["step_seconds"], rel=1e-12)
    # 70B over 1,024 GPUs: the fastest split uses tensor parallelism, so its time is drawn.
    assert answer["best"][0]["layout"]["tensor_parallel"] > 1 and "tensor_parallel" in bars["kinds"]
    assert "expert_parallel" not in bars["kinds"]  # a dense model: no segment that is 0 everywhere
    _rows_shown(page, answer)


def test_the_limits_on_the_form_reach_the_request(api):
    """ZeRO 1 only and full recompute only: every listed layout has them, as the API answers."""
    form = ASKED | {"zero_stage": "1", "recompute": "full", "top_k": 3}
    answer = api.ok(PLAN, ASKED | {"limits": {"zero_stage": [1], "recompute": ["full"]}, "top_k": 3})
    page = _fragment(api, form)
    assert all(s["layout"]["zero_stage"] == 1 and s["layout"]["recompute"] == "full" for s in answer["best"])
    _rows_shown(page, answer)
    assert _testid(page, "fitting") == f"{answer['fitting']:,} of {answer['evaluated']:,}"
    # Tensor parallelism across nodes, allowed: more candidates are timed, fewer refused.
    wide = _fragment(api, ASKED | {"allow_tensor_parallel_across_nodes": "true"})
    allowed = api.ok(PLAN, ASKED | {"limits": {"allow_tensor_parallel_across_nodes": True}})
    assert _testid(wide, "fitting") == f"{allowed['fitting']:,} of {allowed['evaluated']:,}"
    assert allowed["evaluated"] > _plan(api, ASKED)["evaluated"]


def test_a_published_split_context_and_fp8_reach_the_request_and_the_stages_show(api):
    """Llama 3 405B as published (Llama 3 paper, section 3.3.2): 126 layers on 16 stages, 7 on the
    first and the last, 8 chunks per rank, an FP8 recipe; the page answers as the API does and lists
    each stage whose memory can be the peak."""
    asked = {"model": "llama3.1-405b", "gpu": "h100-sxm", "num_gpus": 2048, "global_batch_sequences": 256,
             "seq_len": 8192, "precision": "fp8_delayed", "top_k": 1}
    limits = {"tensor_parallel": [8], "pipeline_parallel": [16], "first_stage_layers": 7, "last_stage_layers": 7,
              "virtual_stages": [8], "context_parallel": [1], "zero_stage": [1], "micro_batch": [1],
              "recompute": ["full"]}
    answer = api.ok(PLAN, asked | {"limits": limits})
    page = _fragment(api, asked | {k: ",".join(map(str, v)) if isinstance(v, list) else v
                                   for k, v in limits.items()})
    _rows_shown(page, answer)
    top = answer["best"][0]["memory"]
    assert _testid(page, "stage-split") == " / ".join(map(str, top["pipeline_split"]))
    assert top["pipeline_split"] == [7] + [8] * 14 + [7]
    for st in top["stages"]:
        assert f'data-testid="stage-{st["stage"]}"' in page


def test_a_global_batch_in_tokens_is_the_same_step(api):
    """256 sequences of 4,096 tokens are 1,048,576 tokens."""
    by_tokens = _fragment(api, ASKED | {"global_batch_sequences": "", "global_batch_tokens": 256 * 4096})
    _rows_shown(by_tokens, _plan(api, ASKED))


def test_nothing_fitting_says_so_and_shows_the_closest(api):
    answer = _plan(api, ONE_NODE)
    assert answer["best"] == [] and answer["fitting"] == 0
    closest = answer["least_memory"]
    assert closest["memory_bytes"] > 70.6e9 * 16 / 8 > 80e9
    page = _fragment(api, ONE_NODE)
    assert _testid(page, "fitting") == f"0 of {answer['evaluated']:,}"
    assert _testid(page, "least-memory") == gb(closest["memory_bytes"])
    assert "No layout fits" in page.split('data-testid="nothing-fits"')[1]
    assert _testid(page, "fits-1") == "no" and _testid(page, "step-1") == duration(closest["step_seconds"])
    charts = _charts(page)
    assert charts["layout_scatter"]["fits"] == [] and charts["layout_scatter"]["chosen"]["label"].startswith(
        "closest: ")
    assert [b["label"] for b in charts["step_bars"]["bars"]] == ["closest"]


REFUSALS = [
    ({"num_gpus": 12}, "num_gpus"),  # 12 GPUs do not fill whole nodes of 8 (the engine's rule)
    ({"global_batch_tokens": 1000}, "global_batch_sequences"),  # both given
    # 1,000 tokens are no whole number of 4,096-token sequences.
    ({"global_batch_sequences": "", "global_batch_tokens": 1000}, "global_batch_tokens"),
    ({"gpu": "h100-sxn"}, "gpu"),
    ({"compute_efficiency": 2}, "compute_efficiency"),
    ({"model": "llama9"}, "model"),
]


@pytest.mark.parametrize(("bad", "field"), REFUSALS, ids=[r[1] + str(i) for i, r in enumerate(REFUSALS)])
def test_bad_input_shows_the_apis_422_beside_its_field(api, bad, field):
    body = {k: v for k, v in (ASKED | bad).items() if v != ""}
    refused = api.post(PLAN, body)
    assert refused.status_code == 422
    (item,) = [i for i in refused.json()["detail"] if i["field"] == field]
    page = _fragment(api, ASKED | bad)
    assert _errors(page) == {field: item["msg"]}
    assert 'data-testid="fitting"' not in page


@pytest.mark.parametrize(("name", "value"), [("zero_stage", "1, 7"), ("recompute", "none, most")])
def test_a_refused_limit_shows_the_apis_message_beside_its_input(api, name, value):
    """The API names limits.zero_stage.1; the page's input for it is zero_stage."""
    given = [int(v) if v.strip().isdigit() else v.strip() for v in value.split(",")]
    refused = api.post(PLAN, ASKED | {"limits": {name: given}})
    assert refused.status_code == 422
    (item,) = refused.json()["detail"]
    assert item["field"] == f"limits.{name}.1"
    assert _errors(_fragment(api, ASKED | {name: value})) == {name: item["msg"]}


def test_the_collective_page_is_the_apis_answer_and_a_ring_by_hand(api):
    """all_reduce of 1 GB over the 8 GPUs of one HGX H100 node: NVLink SHARP, as NCCL runs it on an
    NVSwitch Hopper node. Each link carries S (g + 1) / g = 1.125 GB (nccl-tests PR 239: algbw =
    B g / (g + 1)) at B = 68% of NVLink 4's 450 GB/s per direction (8 x H200 NVLS sweeps: B of 304-311
    GB/s, stas00/ml-engineering network/README.md), after NCCL's 25 us NVLS latency:
    25e-6 + 1.125e9 / 306e9 = 3.7015 ms; busbw = algbw x 2(n-1)/n."""
    form = {"collective": "all_reduce", "bytes": "1GB", "ranks": 8, "gpus_per_node": 8, "gpu": "h100-sxm"}
    page = _fragment(api, form, "/ui/scale/collective")
    answer = api.ok(COLLECTIVE, form | {"bytes": 10**9})
    by_hand = 25e-6 + 1.125e9 / (0.68 * 450e9)
    assert answer["seconds"] == pytest.approx(by_hand, rel=1e-12)
    assert _testid(page, "seconds") == duration(by_hand) == "3.70 ms"
    assert _testid(page, "algbw") == f"{sig(1e9 / by_hand / 1e9)} GB/s"
    assert _testid(page, "busbw") == f"{sig(1.75 * 1e9 / by_hand / 1e9)} GB/s"
    assert _testid(page, "nodes") == "1 × 8"
    assert _testid(page, "level-bytes-intra_node") == "1.125 GB"
    assert 'data-testid="level-inter_node"' not in page
    # Across 8 nodes a second level, as the API answers it.
    wide = _fragment(api, form | {"ranks": 64}, "/ui/scale/collective")
    levels = api.ok(COLLECTIVE, form | {"bytes": 10**9, "ranks": 64})["levels"]
    for level in levels:
        assert _testid(wide, f"level-seconds-{level['name']}") == duration(level["seconds"])
    assert [lv["name"] for lv in levels] == ["intra_node", "inter_node"]


def test_a_refused_collective_shows_the_apis_message(api):
    form = {"collective": "all_reduce", "bytes": "1GB", "ranks": 12, "gpus_per_node": 8, "gpu": "h100-sxm"}
    refused = api.post(COLLECTIVE, form)
    assert refused.status_code == 422
    shown = _errors(_fragment(api, form, "/ui/scale/collective"))
    assert shown == {"ranks": refused.json()["detail"][0]["msg"]}


def test_the_nav_and_the_overview_lead_to_it(api):
    for path in ("/", "/memory", "/scale"):
        assert '<a href="/scale">Scale</a>' in api.get(path).text
    assert 'href="/scale"' in api.get("/").text.split('aria-label="Tools"')[1]
    assert 'href="/scale/collective"' in api.get("/scale").text
    assert 'href="/scale"' in api.get("/scale/collective").text
    assert api.get("/static/scale.js").status_code == 200


def test_the_run_has_days_gpu_hours_and_cost_and_the_time_link_carries_it_across(api):
    """Issue 28, point 6: with the run's training tokens, the page gives its length, whole steps of
    the fastest layout's step time, its GPU-hours and cost; the Time page link carries the model,
    GPUs, GPU, that layout's MFU and the tokens (not one GPU at the default MFU)."""
    asked = ASKED | {"training_tokens": "15T", "price_per_gpu_hour": 2}
    answer = api.ok(PLAN, asked)
    top, run = answer["best"][0], answer["run"]
    steps = -(-15 * 10**12 // answer["tokens_per_step"])
    assert run["steps"] == steps and run["step_seconds"] == top["step_seconds"]
    assert run["days"] == pytest.approx(steps * top["step_seconds"] / 86_400, rel=1e-12)
    assert run["gpu_hours"] == pytest.approx(steps * top["step_seconds"] * 64 / 3600, rel=1e-12)
    assert run["cost"] == pytest.approx(run["gpu_hours"] * 2, rel=1e-12) and run["currency"] == "USD"
    page = _fragment(api, asked)
    assert _testid(page, "run-days") == f"{sig(run['days'])} days"
    assert _testid(page, "run-gpu-hours") == amount(run["gpu_hours"])
    link = html.unescape(re.search(r'href="/time\?([^"]*)" data-testid="time-link"', page).group(1))
    carried = dict(p.split("=", 1) for p in link.split("&"))
    assert carried | {"mfu": None} == {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": "64",
                                       "tokens": str(15 * 10**12), "price_per_gpu_hour": "2.0",
                                       "currency": "USD", "mfu": None}
    assert float(carried["mfu"]) == pytest.approx(top["mfu"], rel=1e-3)
    time = api.get(f"/ui/time?{link}").text
    assert "refused" not in time and _errors(time) == {}


def test_without_training_tokens_the_page_asks_for_them(api):
    page = _fragment(api, ASKED)
    assert "give the training tokens" in page
    assert api.ok(PLAN, ASKED)["run"] is None
