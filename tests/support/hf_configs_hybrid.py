"""config.json dicts of the hybrid families (qwen3_next, bamba), typed here: the published models'
and small ones for the FLOP and cache oracles, and seeded random ones."""

import random

# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (the model card: 80B total, 3B active).
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "mlp_only_layers": [],
    "model_type": "qwen3_next",
    "moe_intermediate_size": 512,
    "norm_topk_prob": True,
    "num_attention_heads": 16,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "num_hidden_layers": 48,
    "num_key_value_heads": 2,
    "output_router_logits": False,
    "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
# ibm-ai-platform/Bamba-9B config.json (the card: 9B); attention on layers 9, 18 and 27.
BAMBA_9B = {
    "architectures": ["BambaForCausalLM"],
    "model_type": "bamba",
    "attn_layer_indices": [9, 18, 27],
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "mamba_chunk_size": 256,
    "mamba_conv_bias": True,
    "mamba_d_conv": 4,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_expand": 2,
    "mamba_n_groups": 1,
    "mamba_n_heads": 128,
    "mamba_proj_bias": False,
    "max_position_embeddings": 262144,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "vocab_size": 128256,
}

# Small ones: linear layers 0-2 and attention on 3 (Qwen3-Next), Mamba-2 but on layer 1 (Bamba), Mamba-1 with
# attention on odd layers and experts on layers 0 and 3 (Jamba); key and
# value heads differ, several groups, chunk sizes the sequences do not divide.
SMALL = {
    "qwen3_next": {
        "model_type": "qwen3_next",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 200,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 12,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 24,
        "shared_expert_intermediate_size": 32,
        "mlp_only_layers": [1],
    },
    "bamba": {
        "model_type": "bamba",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 200,
        "attn_layer_indices": [1],
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_expand": 2,
        "mamba_n_groups": 2,
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_chunk_size": 16,
    },
}


def _qwen3_next(rng: random.Random) -> dict:
    key_heads = rng.choice([1, 2])
    n = rng.randint(2, 5)
    return {
        "model_type": "qwen3_next",
        "hidden_size": rng.choice([32, 48, 64]),
        "intermediate_size": rng.choice([40, 64]),
        "num_hidden_layers": n,
        "num_attention_heads": 4,
        "num_key_value_heads": rng.choice([1, 2, 4]),
        "head_dim": rng.choice([8, 16]),
        "vocab_size": rng.randint(50, 300),
        "linear_num_key_heads": key_heads,
        "linear_num_value_heads": key_heads * rng.choice([1, 2, 3]),
        "linear_key_head_dim": rng.choice([4, 8]),
        "linear_value_head_dim": rng.choice([4, 8, 12]),
        "linear_conv_kernel_dim": rng.choice([2, 3, 4]),
        "full_attention_interval": rng.choice([1, 2, 3]),
        "num_experts": rng.choice([0, 4, 6]),
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": rng.choice([8, 24]),
        "decoder_sparse_step": rng.choice([1, 2]),
        "attention_bias": rng.random() < 0.5,
        "tie_word_embeddings": rng.random() < 0.5,
    }


def _bamba(rng: random.Random) -> dict:
    d, heads = rng.choice([32, 64]), rng.choice([4, 8])
    n = rng.randint(2, 5)
    return {
        "model_type": "bamba",
        "hidden_size": d,
        "intermediate_size": rng.choice([40, 96]),
        "num_hidden_layers": n,
        "num_attention_heads": 4,
        "num_key_value_heads": rng.choice([1, 2, 4]),
        "vocab_size": rng.randint(50, 300),
        "attn_layer_indices": sorted(rng.sample(range(n), rng.randint(0, 2))),
        "mamba_n_heads": heads,
        "mamba_d_head": "auto",
        "mamba_expand": 2,
        "mamba_n_groups": rng.choice([g for g in (1, 2, 4) if heads % g == 0]),
        "mamba_d_state": rng.choice([4, 8, 16]),
        "mamba_d_conv": rng.choice([2, 4]),
        "mamba_chunk_size": rng.choice([8, 16, 32]),
        "mamba_conv_bias": rng.random() < 0.5,
        "mamba_proj_bias": rng.random() < 0.5,
        "mlp_bias": rng.random() < 0.5,
        "tie_word_embeddings": rng.random() < 0.5,
    }


GENERATORS = {"qwen3_next": _qwen3_next, "bamba": _bamba}


def random_configs(per_family: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [GENERATORS[family](rng) for _ in range(per_family) for family in GENERATORS]


# ai21labs/Jamba-v0.1 config.json (the card: 52B total, 12B active); attention on layer 4 of every 8,
# 16 experts top-2 on odd layers.
JAMBA_V01 = {
    "architectures": ["JambaForCausalLM"],
    "model_type": "jamba",
    "attn_layer_offset": 4,
    "attn_layer_period": 8,
    "expert_layer_offset": 1,
    "expert_layer_period": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "mamba_conv_bias": True,
    "mamba_d_conv": 4,
    "mamba_d_state": 16,
    "mamba_dt_rank": 256,
    "mamba_expand": 2,
    "mamba_proj_bias": False,
    "max_position_embeddings": 262144,
    "num_attention_heads": 32,
    "num_experts": 16,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "vocab_size": 65536,
}
SMALL["jamba"] = {
    "model_type": "jamba",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 200,
    "attn_layer_period": 2,
    "attn_layer_offset": 1,
    "expert_layer_period": 3,
    "expert_layer_offset": 0,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "mamba_d_state": 8,
    "mamba_d_conv": 3,
    "mamba_expand": 2,
    "mamba_dt_rank": "auto",
    "mamba_proj_bias": True,
}


def _jamba(rng: random.Random) -> dict:
    n = rng.randint(2, 5)
    period = rng.randint(1, 4)
    expert_period = rng.randint(1, 3)
    return {
        "model_type": "jamba",
        "hidden_size": rng.choice([32, 48, 64]),
        "intermediate_size": rng.choice([40, 96]),
        "num_hidden_layers": n,
        "num_attention_heads": 4,
        "num_key_value_heads": rng.choice([1, 2, 4]),
        "vocab_size": rng.randint(50, 300),
        "attn_layer_period": period,
        "attn_layer_offset": rng.randrange(period),
        "expert_layer_period": expert_period,
        "expert_layer_offset": rng.randrange(expert_period),
        "num_experts": rng.choice([1, 3, 4]),
        "num_experts_per_tok": rng.choice([1, 2]),
        "mamba_d_state": rng.choice([4, 8]),
        "mamba_d_conv": rng.choice([2, 4]),
        "mamba_expand": rng.choice([1, 2]),
        "mamba_dt_rank": rng.choice(["auto", 3]),
        "mamba_conv_bias": rng.random() < 0.5,
        "mamba_proj_bias": rng.random() < 0.5,
        "tie_word_embeddings": rng.random() < 0.5,
    }


GENERATORS["jamba"] = _jamba


# Nemotron-H: one block per layer, Mamba-2 (M), attention (*), a squared-ReLU MLP (-) and experts (E).
SMALL["nemotron_h"] = {
    "model_type": "nemotron_h",
    "hidden_size": 64,
    "intermediate_size": 96,
    "hybrid_override_pattern": "M-M*EM",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 200,
    "mamba_num_heads": 8,
    "mamba_head_dim": 12,
    "n_groups": 2,
    "ssm_state_size": 8,
    "conv_kernel": 4,
    "chunk_size": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 24,
    "moe_shared_expert_intermediate_size": 40,
    "use_bias": True,
}


def _nemotron_h(rng: random.Random) -> dict:
    heads = rng.choice([4, 8])
    pattern = "".join(rng.choice("M*-E") for _ in range(rng.randint(2, 6)))
    return {
        "model_type": "nemotron_h",
        "hidden_size": rng.choice([32, 64]),
        "intermediate_size": rng.choice([40, 96]),
        "hybrid_override_pattern": pattern,
        "num_attention_heads": 4,
        "num_key_value_heads": rng.choice([1, 2, 4]),
        "head_dim": rng.choice([8, 16]),
        "vocab_size": rng.randint(50, 300),
        "mamba_num_heads": heads,
        "mamba_head_dim": rng.choice([4, 8]),
        "n_groups": rng.choice([g for g in (1, 2, 4) if heads % g == 0]),
        "ssm_state_size": rng.choice([4, 8]),
        "conv_kernel": rng.choice([2, 4]),
        "chunk_size": rng.choice([8, 16]),
        "n_routed_experts": rng.choice([3, 4]),
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "moe_shared_expert_intermediate_size": rng.choice([8, 24]),
        "use_bias": rng.random() < 0.5,
        "use_conv_bias": rng.random() < 0.5,
    }


GENERATORS["nemotron_h"] = _nemotron_h

# nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json: 27 Mamba-2, 4 attention and 25 MLP layers (the card: 9B;
# the same widths as NeMo's NemotronNano9Bv2 recipe and Megatron-LM's --hybrid-override-pattern).
NEMOTRON_NANO_9B_V2 = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "attention_bias": False,
    "chunk_size": 128,
    "conv_kernel": 4,
    "head_dim": 128,
    "hidden_size": 4480,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "intermediate_size": 15680,
    "mamba_head_dim": 80,
    "mamba_hidden_act": "silu",
    "mamba_num_heads": 128,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "mlp_hidden_act": "relu2",
    "n_groups": 8,
    "num_attention_heads": 40,
    "num_hidden_layers": 56,
    "num_key_value_heads": 8,
    "ssm_state_size": 128,
    "tie_word_embeddings": False,
    "use_bias": False,
    "use_conv_bias": True,
    "vocab_size": 131072,
}


# Falcon-H1: attention and Mamba-2 side by side in every layer.
SMALL["falcon_h1"] = {
    "model_type": "falcon_h1",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 24,
    "vocab_size": 200,
    "mamba_d_ssm": 96,
    "mamba_n_heads": 8,
    "mamba_d_head": "auto",
    "mamba_n_groups": 2,
    "mamba_d_state": 8,
    "mamba_d_conv": 4,
    "mamba_chunk_size": 16,
    "mamba_rms_norm": True,
    "projectors_bias": True,
    "attention_bias": True,
}


def _falcon_h1(rng: random.Random) -> dict:
    heads = rng.choice([4, 8])
    return {
        "model_type": "falcon_h1",
        "hidden_size": rng.choice([32, 64]),
        "intermediate_size": rng.choice([40, 96]),
        "num_hidden_layers": rng.randint(1, 4),
        "num_attention_heads": 4,
        "num_key_value_heads": rng.choice([1, 2, 4]),
        "vocab_size": rng.randint(50, 300),
        "mamba_d_ssm": rng.choice([None, heads * 8]),
        "mamba_expand": rng.choice([1, 2]),
        "mamba_n_heads": heads,
        "mamba_d_head": "auto",
        "mamba_n_groups": rng.choice([g for g in (1, 2, 4) if heads % g == 0]),
        "mamba_d_state": rng.choice([4, 8]),
        "mamba_d_conv": rng.choice([2, 4]),
        "mamba_chunk_size": rng.choice([8, 16]),
        "mamba_rms_norm": rng.random() < 0.5,
        "mamba_conv_bias": rng.random() < 0.5,
        "mamba_proj_bias": rng.random() < 0.5,
        "projectors_bias": rng.random() < 0.5,
        "attention_bias": rng.random() < 0.5,
        "mlp_bias": rng.random() < 0.5,
        "tie_word_embeddings": rng.random() < 0.5,
    }


GENERATORS["falcon_h1"] = _falcon_h1

# tiiuae/Falcon-H1-7B-Instruct's shape keys, as two public sizing tools quote its config.json (the card:
# 7B); the rest at FalconH1Config's defaults (no projector or Mamba biases, no Mamba norm).
FALCON_H1_7B = {
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "hidden_size": 3072,
    "num_hidden_layers": 44,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 130048,
    "tie_word_embeddings": False,
    "mamba_d_state": 256,
    "mamba_n_groups": 1,
    "mamba_n_heads": 24,
    "mamba_d_head": 128,
    "mamba_d_ssm": 3072,
    "mamba_expand": 2,
    "mamba_d_conv": 4,
    "mamba_chunk_size": 128,
    "max_position_embeddings": 262144,
}
