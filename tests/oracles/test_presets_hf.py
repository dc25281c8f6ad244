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


# Today's mixture-of-experts, latent-attention and local-attention presets, against the
# published config.json of each (only the keys that shape weights; the rest are defaults).
QWEN3 = {"vocab_size": 151936, "max_position_embeddings": 40960, "head_dim": 128,
         "tie_word_embeddings": False, "attention_bias": False}
GEMMA2 = {"vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096,
          "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "tie_word_embeddings": True}


def _today_configs() -> dict:
    from transformers import (
        DeepseekV2Config,
        DeepseekV3Config,
        Gemma2Config,
        Gemma3TextConfig,
        MixtralConfig,
        Olmo2Config,
        Qwen3Config,
        Qwen3MoeConfig,
    )
    return {
        "mixtral-8x7b": MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                      num_local_experts=8, num_experts_per_tok=2,
                                      max_position_embeddings=32768),
        "mixtral-8x22b": MixtralConfig(vocab_size=32768, hidden_size=6144, intermediate_size=16384,
                                       num_hidden_layers=56, num_attention_heads=48, num_key_value_heads=8,
                                       num_local_experts=8, num_experts_per_tok=2,
                                       max_position_embeddings=65536),
        "deepseek-v2-lite": DeepseekV2Config(
            vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
            num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_shared_experts=2,
            n_routed_experts=64, num_experts_per_tok=6, first_k_dense_replace=1, q_lora_rank=None,
            kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
            max_position_embeddings=163840, tie_word_embeddings=False),
        "deepseek-v3": DeepseekV3Config(
            vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
            num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
            n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3, q_lora_rank=1536,
            kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_group=8,
            topk_group=4, max_position_embeddings=163840, tie_word_embeddings=False),
        "qwen3-8b": Qwen3Config(**QWEN3, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                                num_attention_heads=32, num_key_value_heads=8),
        "qwen3-32b": Qwen3Config(**QWEN3, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                                 num_attention_heads=64, num_key_value_heads=8),
        "qwen3-30b-a3b": Qwen3MoeConfig(**QWEN3, hidden_size=2048, intermediate_size=6144,
                                        moe_intermediate_size=768, num_hidden_layers=48,
                                        num_attention_heads=32, num_key_value_heads=4, num_experts=128,
                                        num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[]),
        "qwen3-235b-a22b": Qwen3MoeConfig(**QWEN3, hidden_size=4096, intermediate_size=12288,
                                          moe_intermediate_size=1536, num_hidden_layers=94,
                                          num_attention_heads=64, num_key_value_heads=4, num_experts=128,
                                          num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[]),
        "gemma-2-9b": Gemma2Config(**GEMMA2, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                                   num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                                   query_pre_attn_scalar=256),
        "gemma-2-27b": Gemma2Config(**GEMMA2, hidden_size=4608, intermediate_size=36864, num_hidden_layers=46,
                                    num_attention_heads=32, num_key_value_heads=16, head_dim=128,
                                    query_pre_attn_scalar=144),
        "gemma-3-27b": Gemma3TextConfig(vocab_size=262208, hidden_size=5376, intermediate_size=21504,
                                        num_hidden_layers=62, num_attention_heads=32, num_key_value_heads=16,
                                        head_dim=128, query_pre_attn_scalar=168, sliding_window=1024,
                                        max_position_embeddings=131072),
        "olmo-2-7b": Olmo2Config(vocab_size=100352, hidden_size=4096, intermediate_size=11008,
                                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                 max_position_embeddings=4096, tie_word_embeddings=False),
    }


TODAY = list(_today_configs())


def _built(config):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("name", TODAY)
def test_todays_presets_count_as_transformers_does(name):
    config = _today_configs()[name]
    model = _built(config)
    counted = models.count_params(models.preset(name))
    assert counted.total == sum(p.numel() for p in model.parameters())
    # Active: transformers' routed-expert tensors (the ".experts." modules, shared experts
    # apart), of which a token uses top_k of n_experts.
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) \
        or getattr(config, "n_routed_experts", None)
    unused = routed - routed * config.num_experts_per_tok // experts if routed else 0
    assert counted.active == counted.total - unused
    buffers = sum(b.numel() for n, b in model.named_buffers() if "e_score_correction_bias" in n)
    assert counted.buffers == buffers


@pytest.mark.parametrize(("name", "total", "active"), [
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),  # the issue's figures, transformers' own
    ("deepseek-v3", 671_026_404_352, None),
    ("gemma-2-9b", 9_241_705_984, None),
    ("qwen3-8b", 8_190_735_360, None),
])
def test_published_totals(name, total, active):
    counted = models.count_params(models.preset(name))
    assert counted.total == total
    assert counted.active == (active or counted.active)
    if name == "deepseek-v3":  # "about 37B active"
        assert 36e9 < counted.active < 38e9


def test_presets_answer_their_conventions(api):
    listing = {m["name"]: m for m in api.get("/api/v1/models").json()["data"]}
    assert any("dropless" in w for w in listing["mixtral-8x7b"]["warnings"])
    assert any("multi-token-prediction" in w for w in listing["deepseek-v3"]["warnings"])
    assert any("buffer" in w for w in listing["deepseek-v3"]["warnings"])
    assert any("softcapping" in w for w in listing["gemma-2-9b"]["warnings"])
    assert any("vision" in w for w in listing["gemma-3-27b"]["warnings"])
    assert listing["mixtral-8x7b"]["params"]["active"] < listing["mixtral-8x7b"]["params"]["total"]
    assert listing["llama3-8b"]["params"]["active"] == listing["llama3-8b"]["params"]["total"]
    families = {m["family"] for m in listing.values()}
    assert families >= {"Mixtral", "DeepSeek", "Qwen3", "Gemma", "OLMo", "Llama"}
