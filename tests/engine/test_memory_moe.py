"""Training memory of mixture-of-experts and latent-attention models: activations worked
out item by item from the tensors each layer keeps (Korthikanti et al.'s method, extended
to the router, the routed tokens and MLA's latents), and parameters per GPU under tensor,
pipeline and expert parallelism counted from transformers' own modules, sharded by name as
Megatron-LM and vLLM shard them."""

import math

import pytest
import torch

from app.accounting.models import TransformerConfig
from app.accounting.training import sharding
from tests.support.api import assert_names_field

TRAINING = "/api/v1/memory/training"

# Mixtral-8x7B's shape, typed here (config.json of mistralai/Mixtral-8x7B-v0.1).
MIXTRAL = {"n_layers": 32, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 32000,
           "d_ff": 14336, "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": False,
           "position": "rope", "max_seq_len": 32768, "n_experts": 8, "top_k": 2}
# DeepSeek-V3's attention and experts (config.json of deepseek-ai/DeepSeek-V3), 61 layers.
DEEPSEEK_V3 = {"n_layers": 61, "d_model": 7168, "n_heads": 128, "vocab_size": 129280, "d_ff": 18432,
               "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": False,
               "position": "rope", "max_seq_len": 163840, "q_lora_rank": 1536, "kv_lora_rank": 512,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_experts": 256,
               "top_k": 8, "d_ff_expert": 2048, "n_shared_experts": 1, "first_dense_layers": 3,
               "router_score_correction": True}


def test_a_mixtral_layer_keeps_the_routed_tokens_top_k_times(api):
    """bf16, selective recompute, s = 4096, b = 1: every saved tensor of one Mixtral layer."""
    s, b = 4096, 1
    sb, h, heads, kv, hd, e, k, fe = s * b, 4096, 32, 8, 128, 8, 2, 14336
    attention = (2 * sb * h              # norm input
                 + 2 * sb * h            # q/k/v projection input
                 + 2 * sb * (heads + kv) * hd  # q and k (SDPA keeps K at the kv heads' width)
                 + 2 * sb * kv * hd      # v
                 + 2 * sb * heads * hd)  # output projection input
    router = (2 * sb * h                 # the MLP norm's input
              + 2 * sb * h               # its output: the router's (and the gather's) input
              + 4 * sb * e               # softmax over the experts, fp32
              + 4 * sb * (k + 1)         # the top-k probabilities and their sum (renormalisation)
              + 8 * sb * 2 * k)          # int64 top-k expert ids and the sort permutation
    experts = (2 * sb * k * h            # top_k copies of each token's input
               + 4 * 2 * sb * k * fe     # gate and up outputs, silu output, down input
               + 2 * sb * k * h          # each copy's output ...
               + 2 * sb * k)             # ... and its routing weight, for the weighted sum
    body = api.ok(TRAINING, {"model": MIXTRAL, "batch_size": b, "seq_len": s, "precision": "bf16_mixed",
                             "recompute": "selective"})
    detail = body["activation_detail"]
    assert detail["per_layer_total"] == attention + router + experts
    assert detail["per_layer"]["moe/expert_inputs"] == 2 * sb * k * h
    assert detail["layers_held"] == 32 and detail["dense_layers_held"] == 0
    head = 2 * sb * h + 2 * sb * h + 4 * sb * 32000  # final norm input, LM head input, fp32 logits
    assert body["activations"] == 32 * (attention + router + experts) + head


def test_tensor_parallelism_gathers_tokens_for_the_experts(api):
    """With sequence parallelism every tensor divides by t but the tokens gathered for the
    experts, which each tensor rank holds whole; without it, only the per-head and hidden
    tensors divide."""
    s, t, sb, h, k, fe = 2048, 4, 2048, 4096, 2, 14336
    common = {"model": MIXTRAL, "seq_len": s, "precision": "bf16_mixed", "tensor_parallel": t}
    whole = api.ok(TRAINING, common | {"tensor_parallel": 1})["activation_detail"]["per_layer"]
    sp = api.ok(TRAINING, common)["activation_detail"]["per_layer"]
    assert sp["moe/expert_inputs"] == whole["moe/expert_inputs"] == 2 * sb * k * h
    assert all(sp[name] == whole[name] // t for name in whole if name != "moe/expert_inputs")
    no_sp = api.ok(TRAINING, common | {"sequence_parallel": False})["activation_detail"]["per_layer"]
    assert no_sp["moe/expert_gate_output"] == 2 * sb * k * fe // t
    assert no_sp["moe/expert_outputs"] == 2 * sb * k * h and no_sp["moe/router_probs_fp32"] == 4 * sb * 8


def test_deepseek_v3_latent_attention_and_its_dense_first_layers(api):
    s, b = 4096, 1
    sb, h, heads, q_lat, kv_lat, nope, rope, v = s * b, 7168, 128, 1536, 512, 128, 64, 128
    attention = (2 * sb * h                        # norm input
                 + 2 * sb * h                      # the down projections' input
                 + 2 * sb * (q_lat + kv_lat + rope)  # their output, which the latent norms keep
                 + 2 * sb * (q_lat + kv_lat)       # the normalised latents, up projections' input
                 + 2 * sb * 2 * heads * (nope + rope)  # q and k per head, rotary key copied to all
                 + 2 * sb * heads * v              # v
                 + 2 * sb * heads * v)             # output projection input
    dense_mlp = 2 * sb * h + 2 * sb * h + 4 * 2 * sb * 18432
    e, k, fe, fs = 256, 8, 2048, 2048
    moe = (2 * sb * h + 2 * sb * h + 4 * sb * e + 4 * sb * (k + 1) + 8 * sb * 2 * k
           + 2 * sb * k * h + 4 * 2 * sb * k * fe + 2 * sb * k * h + 2 * sb * k
           + 4 * 2 * sb * fs)                      # the shared expert's gate/up, silu, down input
    body = api.ok(TRAINING, {"model": DEEPSEEK_V3, "batch_size": b, "seq_len": s, "precision": "bf16_mixed",
                             "recompute": "selective"})
    detail = body["activation_detail"]
    assert detail["dense_layer_total"] == attention + dense_mlp
    assert detail["per_layer_total"] == attention + moe
    assert (detail["layers_held"], detail["dense_layers_held"]) == (58, 3)
    # 1F1B over 4 stages, 16 layers on the first (Megatron-LM's --decoder-first-pipeline-num-layers),
    # 15 on each other: the first holds layers 0-15 (3 dense, 13 routed) for 4 micro-batches.
    answer = api.ok(TRAINING, {"model": DEEPSEEK_V3, "seq_len": s, "pipeline_parallel": 4, "first_stage_layers": 16,
                               "data_parallel": 8, "expert_parallel": 8})
    assert answer["pipeline_split"] == [16, 15, 15, 15]
    first = answer["activation_detail"]
    assert answer["pipeline_stage_index"] == 0
    assert (first["layers_held"], first["dense_layers_held"]) == (13 * 4, 3 * 4)


# DeepSeek-V3 in miniature: a dense first layer, then three with a shared expert and top-2 of
# 8, latent attention with a query latent, untied head.
SMALL_DEEPSEEK = {"n_layers": 4, "d_model": 256, "n_heads": 8, "vocab_size": 1000, "d_ff": 512,
                  "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": False,
                  "position": "rope", "max_seq_len": 4096, "q_lora_rank": 96, "kv_lora_rank": 64,
                  "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "n_experts": 8,
                  "top_k": 2, "d_ff_expert": 64, "n_shared_experts": 1, "first_dense_layers": 1,
                  "router_score_correction": True}
# Held whole on every tensor rank (Megatron-LM's MLASelfAttention and router, vLLM's
# ReplicatedLinear): norms, latent down projections, routers.
REPLICATED = ("layernorm", "q_a_proj", "kv_a_proj_with_mqa", "mlp.gate.weight", "model.norm")


def hf_shards(tp: int, ep: int) -> dict[str, tuple[int, int]]:
    """Per pipeline stage of 2 (2 layers each): (parameters outside the routed experts,
    routed-expert parameters) on one GPU, from transformers' DeepSeek-V3 built on meta."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(
        vocab_size=1000, hidden_size=256, intermediate_size=512, moe_intermediate_size=64,
        num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8, n_shared_experts=1,
        n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=96,
        kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_group=1,
        topk_group=1, tie_word_embeddings=False)
    with torch.device("meta"):
        model = DeepseekV3ForCausalLM(cfg)
    stages = {"first": ("model.embed_tokens", "model.layers.0.", "model.layers.1."),
              "last": ("model.layers.2.", "model.layers.3.", "model.norm", "lm_head")}
    out = {}
    for stage, prefixes in stages.items():
        rest = experts = 0
        for name, p in model.named_parameters():
            if not name.startswith(prefixes):
                continue
            if ".mlp.experts." in name:
                experts += p.numel() // (tp * ep)
            elif any(key in name for key in REPLICATED):
                rest += p.numel()
            else:
                rest += p.numel() // tp
        out[stage] = (rest, experts)
    return out


@pytest.mark.parametrize("tp,ep", [(1, 1), (2, 1), (1, 4), (2, 8)])
def test_parameters_per_gpu_follow_each_layers_kind_and_shard(api, tp, ep):
    expected = hf_shards(tp, ep)
    cfg = TransformerConfig(**SMALL_DEEPSEEK)
    assert {stage.kind: (n, e) for stage, n, e in sharding.stage_params(cfg, tp, 2, ep)} == expected
    body = api.ok(TRAINING, {"model": SMALL_DEEPSEEK, "seq_len": 1024, "tensor_parallel": tp,
                             "pipeline_parallel": 2, "data_parallel": 8, "expert_parallel": ep})
    rest, experts = expected[body["pipeline_stage"]]
    assert (body["params_per_gpu"], body["expert_params_per_gpu"]) == (rest + experts, experts)


def test_zero_shards_expert_states_over_the_ranks_that_hold_the_same_experts(api):
    """Mixed-precision AdamW, ZeRO stage 1, 8 data-parallel ranks in expert groups of 4: the
    dense states divide by 8, the experts' by 8 / 4 = 2 (ranks holding the same experts)."""
    body = api.ok(TRAINING, {"model": MIXTRAL, "seq_len": 4096, "zero_stage": 1, "data_parallel": 8,
                             "expert_parallel": 4, "precision": "bf16_mixed", "optimizer": "adamw"})
    layers, d, kv_width = 32, 4096, 8 * 128
    experts = layers * 8 * 3 * d * 14336 // 4  # a quarter of every layer's experts
    rest = (layers * (d * (d + 2 * kv_width) + d * d  # q, k, v, o
                      + 8 * d + 2 * d)                # router, two norms
            + 2 * 32000 * d + d)                      # embedding, head, final norm
    assert (body["params_per_gpu"], body["expert_params_per_gpu"]) == (rest + experts, experts)
    assert body["parameters"] == body["gradients"] == 2 * (rest + experts)
    assert body["optimizer_state"] == 8 * rest // 8 + 8 * experts // 2
    assert body["master_weights"] == 4 * rest // 8 + 4 * experts // 2
    assert any("data_parallel / expert_parallel (2)" in note for note in body["assumptions"])


def test_bf16_autocast_copies_every_routed_expert(api):
    """Autocast's 16-bit weight copies cover the routed experts whole, and of the rest the
    matmul weights: not norms, nor the embedding table (a lookup), but the LM head."""
    body = api.ok(TRAINING, {"model": MIXTRAL, "seq_len": 1024, "precision": "bf16_autocast"})
    layers, d = 32, 4096
    matmuls = layers * (d * (d + 2 * 1024) + d * d + 8 * d + 8 * 3 * d * 14336) + 32000 * d
    assert body["weight_copies"] == pytest.approx(2 * matmuls, abs=1)


def test_expert_parallel_refusals_name_it(api):
    cases = [
        {"model": MIXTRAL, "data_parallel": 6, "expert_parallel": 3},  # 3 does not divide 8 experts
        {"model": MIXTRAL, "data_parallel": 2, "expert_parallel": 4},  # nor 4 the 2 data ranks
        {"model": "llama2-7b", "data_parallel": 2, "expert_parallel": 2},  # no experts
        {"model": 7e9, "data_parallel": 2, "expert_parallel": 2},  # a bare count has none either
    ]
    for body in cases:
        assert_names_field(api.post(TRAINING, body | {"seq_len": 1024}), "expert_parallel")


def test_expert_parallel_leaves_each_gpus_activations_as_they_were(api):
    """Dropless and even: whatever the split of experts, each GPU receives as many token
    copies as it sends."""
    one = api.ok(TRAINING, {"model": MIXTRAL, "seq_len": 4096, "data_parallel": 8})
    eight = api.ok(TRAINING, {"model": MIXTRAL, "seq_len": 4096, "data_parallel": 8, "expert_parallel": 8})
    assert one["activations"] == eight["activations"]
    assert eight["expert_params_per_gpu"] == one["expert_params_per_gpu"] // 8
    assert math.isclose(one["expert_params_per_gpu"], 32 * 8 * 3 * 4096 * 14336)
