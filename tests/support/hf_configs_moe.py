"""Real config.json files of mixture-of-experts models (from the model cards), typed here so the
import and transformers read the very same bytes (DeepSeek-V3's is in hf_configs_real.py), and
seeded random small configs of each family; SMALL, one small config.json per family for the
oracles to build."""

import random

# mistralai/Mixtral-8x7B-v0.1 config.json.
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
                "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
                "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
                "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
                "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
                "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
# Qwen/Qwen1.5-MoE-A2.7B config.json (model_type qwen2_moe).
QWEN15_MOE_A27B = {"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
                   "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048,
                   "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 8192,
                   "max_window_layers": 21, "model_type": "qwen2_moe", "num_attention_heads": 16,
                   "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
                   "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False,
                   "torch_dtype": "bfloat16", "transformers_version": "4.39.0.dev0", "use_cache": True,
                   "use_sliding_window": False, "vocab_size": 151936, "decoder_sparse_step": 1,
                   "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                   "num_experts_per_tok": 4, "num_experts": 60, "norm_topk_prob": False,
                   "output_router_logits": False, "router_aux_loss_coef": 0.001}
# openai/gpt-oss-20b config.json (its quantization_config stores the experts in MXFP4; the counts
# are the model's, whatever the storage). gpt-oss-120b's differs in num_hidden_layers (36),
# num_local_experts (128), layer_types (36 entries) and router_aux_loss_coef.
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
               "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
               "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
               "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
               "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
               "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
               "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
               "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                                  "model.layers.*.mlp.router",
                                                                  "model.embed_tokens", "lm_head"],
                                       "quant_method": "mxfp4"},
               "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                                       "original_max_position_embeddings": 4096,
                                                       "rope_type": "yarn", "truncate": False},
               "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
               "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True,
               "vocab_size": 201088}
GPT_OSS_120B = GPT_OSS_20B | {"num_hidden_layers": 36, "num_local_experts": 128,
                              "layer_types": ["sliding_attention", "full_attention"] * 18,
                              "router_aux_loss_coef": 0.9}
# zai-org/GLM-4.5 config.json (its count-changing keys and their neighbours; the rest are rope, token
# ids and dtypes) and GLM-4.5-Air's, which differs in the widths, depth, experts and q/k norms.
GLM_45 = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True,
          "attention_dropout": 0.0, "first_k_dense_replace": 3, "head_dim": 128, "hidden_act": "silu",
          "hidden_size": 5120, "intermediate_size": 12288, "max_position_embeddings": 131072,
          "moe_intermediate_size": 1536, "n_group": 1, "n_routed_experts": 160, "n_shared_experts": 1,
          "norm_topk_prob": True, "num_attention_heads": 96, "num_experts_per_tok": 8,
          "num_hidden_layers": 92,
          "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
          "rms_norm_eps": 1e-05, "rope_theta": 1000000, "routed_scaling_factor": 2.5,
          "tie_word_embeddings": False, "topk_group": 1, "torch_dtype": "bfloat16", "use_cache": True,
          "use_qk_norm": True, "vocab_size": 151552}
GLM_45_AIR = GLM_45 | {"first_k_dense_replace": 1, "hidden_size": 4096, "intermediate_size": 10944,
                       "moe_intermediate_size": 1408, "n_routed_experts": 128, "num_hidden_layers": 46,
                       "use_qk_norm": False}
# meta-llama/Llama-4-Scout-17B-16E's text_config (model_type llama4_text; the vision tower is another
# model), its count-changing keys and their neighbours; Maverick-17B-128E's differs in its experts,
# their interleaving with dense layers, and q/k norms.
LLAMA4_SCOUT = {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "attention_bias": False,
                "attention_chunk_size": 8192, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                "intermediate_size": 8192, "intermediate_size_mlp": 16384, "interleave_moe_layer_step": 1,
                "max_position_embeddings": 10485760, "no_rope_layer_interval": 4, "num_attention_heads": 40,
                "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
                "num_local_experts": 16, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
                "tie_word_embeddings": False, "use_qk_norm": True, "vocab_size": 202048,
                "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1}
LLAMA4_MAVERICK = LLAMA4_SCOUT | {"num_local_experts": 128, "interleave_moe_layer_step": 2,
                                  "use_qk_norm": False, "max_position_embeddings": 1048576}
# A small llama4_text for the FLOP oracle: MoE on layers 1 and 3, dense on 0 and 2.
LLAMA4_SMALL = {"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 48,
                "intermediate_size_mlp": 80, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300, "num_local_experts": 4,
                "num_experts_per_tok": 2, "interleave_moe_layer_step": 2, "attention_chunk_size": 16,
                "no_rope_layer_interval": 2}
# Qwen/Qwen3-30B-A3B config.json.
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                 "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
                 "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
                 "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
                 "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
                 "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
                 "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
                 "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
                 "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
                 "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
# deepseek-ai/DeepSeek-V2-Lite config.json (auto_map dropped: it names remote code).
DEEPSEEK_V2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False,
                    "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 100000,
                    "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu",
                    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
                    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
                    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
                    "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16,
                    "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
                    "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "rms_norm_eps": 1e-06,
                    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                                     "type": "yarn"},
                    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
                    "seq_aux": True,
                    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
                    "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": True,
                    "v_head_dim": 128, "vocab_size": 102400}


# Seeded random small configs, one generator per family: the shapes transformers reads, with the
# knobs that change counts (expert counts, top_k, shared experts, dense layers, sparse steps,
# mlp_only_layers, latent ranks with and without a query latent, biases, head_dim, GQA, tying).
def _attention(rng: random.Random, family: str) -> dict:
    heads = rng.choice([1, 2, 4, 8])
    d = heads * rng.choice([4, 6, 8, 12])
    kv = rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0])
    cfg = {"model_type": family, "hidden_size": d, "num_attention_heads": heads, "num_key_value_heads": kv,
           "num_hidden_layers": rng.randint(1, 4), "vocab_size": rng.randint(2, 300),
           "intermediate_size": rng.randint(1, 80), "tie_word_embeddings": rng.random() < 0.3,
           "max_position_embeddings": 256, "hidden_act": rng.choice(["silu", "silu", "gelu"])}
    if rng.random() < 0.4 and family in ("mixtral", "qwen2_moe", "qwen3_moe"):
        cfg["head_dim"] = rng.choice([4, 8, 12])
    return cfg


def _experts(rng: random.Random, cfg: dict, key: str) -> int:
    n = rng.randint(1, 8)
    cfg[key], cfg["num_experts_per_tok"] = n, rng.randint(1, n)
    return n


def _mixtral(rng: random.Random) -> dict:
    cfg = _attention(rng, "mixtral")
    _experts(rng, cfg, rng.choice(["num_local_experts", "num_experts"]))  # attribute_map alias
    if rng.random() < 0.3:
        cfg["sliding_window"] = rng.choice([8, 64])
    return cfg


def _qwen_moe(rng: random.Random, family: str) -> dict:
    cfg = _attention(rng, family)
    layers = cfg["num_hidden_layers"]
    _experts(rng, cfg, "num_experts" if family == "qwen2_moe" or rng.random() < 0.5 else "num_local_experts")
    cfg |= {"moe_intermediate_size": rng.randint(1, 40), "decoder_sparse_step": rng.choice([1, 1, 2, 3]),
            "mlp_only_layers": rng.sample(range(layers + 2), rng.randint(0, layers))}  # may name no layer
    if family == "qwen2_moe":
        cfg |= {"shared_expert_intermediate_size": rng.randint(1, 60), "qkv_bias": rng.random() < 0.7}
        if rng.random() < 0.3:
            cfg |= {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 8}
    else:
        cfg["attention_bias"] = rng.random() < 0.4
    if rng.random() < 0.15:
        cfg["num_experts"] = 0  # Qwen builds every layer dense
        cfg.pop("num_local_experts", None)
    return cfg


def _deepseek(rng: random.Random, family: str) -> dict:
    cfg = _attention(rng, family)
    cfg["num_key_value_heads"] = cfg["num_attention_heads"]  # latent attention's forward needs it
    _experts(rng, cfg, "n_routed_experts")
    # kv_lora_rank even: V2 rotates k_pe as complex pairs, which needs an even offset into the latent.
    cfg |= {"q_lora_rank": rng.choice([None, rng.randint(2, 24)]), "kv_lora_rank": 2 * rng.randint(1, 12),
            "qk_nope_head_dim": rng.choice([2, 4, 8]), "qk_rope_head_dim": rng.choice([2, 4, 8]),
            "v_head_dim": rng.choice([2, 4, 8, 12]), "n_shared_experts": rng.randint(0, 2),
            "moe_intermediate_size": rng.randint(1, 40), "attention_bias": rng.random() < 0.4,
            "first_k_dense_replace": rng.randint(0, cfg["num_hidden_layers"])}
    if family == "deepseek_v3":
        n = cfg["n_routed_experts"]
        groups = rng.choice([g for g in (1, 2, 4) if n % g == 0 and n // g >= 2] or [1])
        cfg |= {"n_group": groups, "topk_group": rng.randint(1, groups),
                "num_nextn_predict_layers": rng.randint(0, 1)}
        if n < 2:  # its router takes the top 2 scores of each group
            cfg |= {"n_routed_experts": 2, "num_experts_per_tok": rng.randint(1, 2)}
    return cfg


def _gpt_oss(rng: random.Random) -> dict:
    cfg = _attention(rng, "gpt_oss")
    _experts(rng, cfg, rng.choice(["num_local_experts", "num_experts"]))  # attribute_map alias
    cfg |= {"attention_bias": rng.random() < 0.8, "sliding_window": rng.choice([4, 16, 128]),
            "head_dim": rng.choice([4, 8, 12])}
    if rng.random() < 0.3:  # every layer sliding, or every third full
        every = rng.choice([0, 3])
        cfg["layer_types"] = ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention"
                              for i in range(cfg["num_hidden_layers"])]
    return cfg


def _glm4_moe(rng: random.Random) -> dict:
    cfg = _attention(rng, "glm4_moe")
    key = rng.choice(["n_routed_experts", "num_local_experts"])  # attribute_map alias
    if _experts(rng, cfg, key) < 2:  # its router takes the top 2 scores of its group
        cfg[key] = 2
    cfg |= {"moe_intermediate_size": rng.randint(1, 40), "n_shared_experts": rng.randint(1, 2),
            "first_k_dense_replace": rng.randint(0, cfg["num_hidden_layers"]),
            "attention_bias": rng.random() < 0.5, "use_qk_norm": rng.random() < 0.5,
            "head_dim": rng.choice([4, 8, 12]), "num_nextn_predict_layers": rng.randint(0, 1)}
    return cfg


GENERATORS = {"mixtral": _mixtral, "gpt_oss": _gpt_oss, "glm4_moe": _glm4_moe,
              "qwen2_moe": lambda rng: _qwen_moe(rng, "qwen2_moe"),
              "qwen3_moe": lambda rng: _qwen_moe(rng, "qwen3_moe"),
              "deepseek_v2": lambda rng: _deepseek(rng, "deepseek_v2"),
              "deepseek_v3": lambda rng: _deepseek(rng, "deepseek_v3")}


def random_configs(per_family: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [GENERATORS[family](rng) for _ in range(per_family) for family in GENERATORS]


# One small config.json per family, typed here; between them: shared experts and their gate, dense
# layers by first_k_dense_replace, decoder_sparse_step and mlp_only_layers, a query latent and none,
# attention biases, head_dim, grouped-query attention, tied embeddings.
SMALL = {
    "mixtral": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16},
    "qwen2_moe": {"model_type": "qwen2_moe", "hidden_size": 48, "intermediate_size": 80,
                  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 200, "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                  "shared_expert_intermediate_size": 40, "decoder_sparse_step": 1, "mlp_only_layers": [2],
                  "tie_word_embeddings": True},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
                  "head_dim": 12, "vocab_size": 150, "num_experts": 8, "num_experts_per_tok": 3,
                  "moe_intermediate_size": 16, "decoder_sparse_step": 2, "attention_bias": True},
    "gpt_oss": {"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16},
    "glm4_moe": {"model_type": "glm4_moe", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 250,
                 "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 20,
                 "n_shared_experts": 1, "first_k_dense_replace": 1, "attention_bias": True,
                 "use_qk_norm": True},
    "deepseek_v2": {"model_type": "deepseek_v2", "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "vocab_size": 250, "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 12, "n_routed_experts": 8, "num_experts_per_tok": 3,
                    "n_shared_experts": 2, "moe_intermediate_size": 20, "first_k_dense_replace": 1},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "vocab_size": 250, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "n_group": 2, "topk_group": 1, "n_shared_experts": 1, "moe_intermediate_size": 20,
                    "first_k_dense_replace": 1, "attention_bias": True},
}
