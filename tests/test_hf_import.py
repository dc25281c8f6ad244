"""Hugging Face import against transformers' own count (tests/hf_oracle.py):
exact totals, and a 422 naming the key wherever a count cannot be exact."""

import pytest

from tests.conftest import assert_names_field
from tests.hf_oracle import hf_param_count

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
