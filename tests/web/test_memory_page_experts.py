"""The Memory page takes expert parallelism and shows what experts cost: the routed-expert
parameters per GPU and the saved tensors of a mixture-of-experts layer, as the API answers."""

import re

from app.numbers import amount

MEMORY = "/api/v1/memory/training"


def _page(api, query: str) -> str:
    response = api.get("/ui/memory?" + query)
    assert response.status_code == 200
    return response.text


def test_expert_parallel_splits_the_experts_on_the_page_as_in_the_api(api):
    body = {"model": "mixtral-8x7b", "data_parallel": 8, "expert_parallel": 8, "seq_len": 4096}
    answer = api.ok(MEMORY, body)
    page = _page(api, "model=mixtral-8x7b&data_parallel=8&expert_parallel=8&seq_len=4096")
    shown = re.search(r'data-testid="expert-params">([^<]+)<', page).group(1)
    assert shown == amount(answer["expert_params_per_gpu"])
    one_rank = api.ok(MEMORY, body | {"expert_parallel": 1})
    assert answer["expert_params_per_gpu"] * 8 == one_rank["expert_params_per_gpu"]
    for item in answer["activation_detail"]["per_layer"]:
        assert f">{item}<" in page
    assert "moe/router_input" in page
    assert "attention, experts, bytes" in page
    assert "attention, MLP, bytes" not in page  # Mixtral has no dense layers


def test_deepseek_shows_its_dense_layers_beside_its_moe_layers(api):
    # Ten layers on the first of 8 stages (its 3 dense ones among them) for 8 micro-batches: the
    # busiest stage, whose activations the page itemizes, holds dense layers beside routed ones.
    page = _page(api, "model=deepseek-v3&data_parallel=64&expert_parallel=64&tensor_parallel=8"
                      "&pipeline_parallel=8&seq_len=4096&first_stage_layers=10")
    assert "latent attention, MLP, bytes" in page and "latent attention, experts, bytes" in page
    assert "attention/latent" in page


def test_a_hybrid_shows_each_kind_of_layer_it_holds(api):
    """Nemotron-H's layers keep different tensors: a Mamba-2 layer, an MLP layer and an attention
    layer each have their column, with as many layers as the API lists."""
    answer = api.ok(MEMORY, {"model": "nemotron-nano-9b-v2"})
    page = _page(api, "model=nemotron-nano-9b-v2")
    for kind in answer["activation_detail"]["layer_kinds"]:
        assert f"{kind['kind']}, bytes" in page
        assert f"{kind['kind']} ({len(kind['layers'])} layers" in page
    assert {k["kind"] for k in answer["activation_detail"]["layer_kinds"]} == {
        "Mamba-2, no MLP", "no mixer, MLP", "attention, no MLP"}
    assert "mamba/in_proj_output" in page


def test_a_dense_model_shows_no_expert_figure(api):
    page = _page(api, "model=gpt2")
    assert 'data-testid="expert-params"' not in page
    assert "moe/" not in page


def test_expert_parallel_that_does_not_divide_the_experts_names_the_field(api):
    page = _page(api, "model=mixtral-8x7b&data_parallel=8&expert_parallel=3")
    assert "expert_parallel" in page and "must divide n_experts" in page
    assert 'data-testid="total-gb"' not in page
