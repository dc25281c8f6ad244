"""Presets of today's dense models, counted exactly as transformers counts them: each model is
built on the meta device from its published config.json, typed here, and its parameters summed."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Phi3Config

from app.accounting import models

LLAMA_31 = {"vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "attention_bias": False, "mlp_bias": False}
CONFIGS = {
    # meta-llama/Llama-3.1-8B and -70B config.json
    "llama3.1-8b": LlamaConfig(**LLAMA_31, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                               num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    "llama3.1-70b": LlamaConfig(**LLAMA_31, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                num_attention_heads=64, num_key_value_heads=8, tie_word_embeddings=False),
    # meta-llama/Llama-3.2-1B and -3B config.json: tied embeddings, head_dim 64 and 128
    "llama3.2-1b": LlamaConfig(**LLAMA_31, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                               tie_word_embeddings=True),
    "llama3.2-3b": LlamaConfig(**LLAMA_31, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                               num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                               tie_word_embeddings=True),
    # microsoft/Phi-3-mini-4k-instruct config.json (qkv_proj and gate_up_proj fused)
    "phi-3-mini": Phi3Config(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                             original_max_position_embeddings=4096, tie_word_embeddings=False,
                             pad_token_id=32000, bos_token_id=1, eos_token_id=32000),
}


def transformers_count(config) -> int:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_preset_counts_as_transformers_does(name):
    assert models.count_params(models.preset(name)).total == transformers_count(CONFIGS[name])


def test_phi_3_mini_is_its_published_total():
    # The issue's figure, transformers' own count of Phi-3-mini: 3,821,079,552.
    assert models.count_params(models.preset("phi-3-mini")).total == 3_821_079_552
