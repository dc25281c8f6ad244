"""Hugging Face import against transformers' own count (tests/support/hf_oracle.py):
exact totals, and a 422 naming the key wherever a count cannot be exact."""

import pytest

from tests.support.api import assert_names_field
from tests.support.hf_oracle import hf_param_count

NEOX_NO_ATTN_BIAS = {"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4,
                     "intermediate_size": 256, "num_hidden_layers": 2, "vocab_size": 100,
                     "attention_bias": False}


def test_gpt_neox_attention_bias_false_drops_only_attention_biases(api):
    # transformers' GPTNeoX: query_key_value and dense lose their biases; the MLP
    # and LayerNorms keep theirs. 4*d_model*n_layers = 512 fewer than with biases.
    truth = hf_param_count(NEOX_NO_ATTN_BIAS)
    assert truth == hf_param_count({**NEOX_NO_ATTN_BIAS, "attention_bias": True}) - 4 * 64 * 2
    body = api.ok("/api/v1/models/import", NEOX_NO_ATTN_BIAS)
    assert body["params"]["total"] == truth
    assert not any("MLP biases are still counted" in w for w in body["warnings"])


LLAMA_SMALL = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 96, "num_hidden_layers": 3, "vocab_size": 101}


@pytest.mark.parametrize("attention_bias,mlp_bias", [(True, False), (False, True)])
def test_llama_attention_and_mlp_biases_count_separately(api, attention_bias, mlp_bias):
    config = {**LLAMA_SMALL, "attention_bias": attention_bias, "mlp_bias": mlp_bias}
    body = api.ok("/api/v1/models/import", config)
    assert body["params"]["total"] == hf_param_count(config)
    assert (body["config"]["attn_bias"], body["config"]["mlp_bias"]) == (attention_bias, mlp_bias)
    assert body["warnings"] == []
    # The imported config, posted inline, drives the FLOPs and memory calculators unchanged.
    flops = api.ok("/api/v1/flops/transformer", {"model": body["config"], "seq_len": 16})
    assert flops["params"]["total"] == body["params"]["total"]
    memory = api.ok("/api/v1/memory/training", {"model": body["config"], "seq_len": 16})
    assert memory["params"] == body["params"]["total"]


def test_tensor_parallel_replicates_only_the_row_parallel_biases_that_exist(api):
    # Megatron splits q/k/v, out, up and down weights and the column-parallel biases
    # (MLP up) over tp ranks; the row-parallel output biases (attention out: absent
    # here; MLP down: d) and the LayerNorms (weight + bias) are whole on every rank.
    d, f, layers, vocab, tp = 64, 256, 2, 100, 2
    model = {"n_layers": layers, "d_model": d, "n_heads": 4, "vocab_size": vocab, "d_ff": f,
             "position": "rope", "tied_embeddings": False, "attn_bias": False}
    sharded = layers * (4 * d * d + 2 * d * f + f) + 2 * vocab * d
    whole = layers * (d + 2 * 2 * d) + 2 * d
    body = api.ok("/api/v1/memory/training", {"model": model, "seq_len": 16, "tensor_parallel": tp})
    assert body["params_per_gpu"] == sharded // tp + whole


@pytest.mark.parametrize("field", ["attn_bias", "mlp_bias"])
def test_bias_switches_refuse_non_booleans(api, field):
    model = {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, field: "sometimes"}
    response = api.post("/api/v1/flops/transformer", {"model": model, "seq_len": 16})
    assert_names_field(response, f"model.{field}")
