"""The train_step probe's mixture-of-experts MLP and latent attention, on CPU at small
sizes: the layers compute what transformers' do, the model is the one the calculators
count (parameters and FLOPs against FlopCounterMode), and its measured memory (peak live
bytes, and the bytes autograd saves per layer) is what the calculators predict."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from app.accounting.models import TransformerConfig
from app.bench import train_step
from app.bench.models import Experts, LatentAttention, Transformer, rope_tables
from tests.support.conv_flops import depthwise_excess
from tests.support.train_step import LLAMA, QUICK, TRAINING, quiet, saved_bytes_per_layer

MAMBA2 = {"ssm_heads": 8, "ssm_head_dim": 16, "ssm_groups": 2, "ssm_state_size": 16, "ssm_chunk_size": 24}
CONFIGS = {
    # Mixtral's layout: every layer routes, top-2 of 4 experts.
    "mixtral": LLAMA | {"n_experts": 4, "top_k": 2, "d_ff_expert": 96},
    # Qwen2-MoE's: a gated shared expert beside top-2 of 8, layer 0 kept dense.
    "qwen2-moe": LLAMA | {"n_layers": 3, "n_experts": 8, "top_k": 2, "d_ff_expert": 32, "n_shared_experts": 1,
                          "d_ff_shared": 64, "shared_expert_gate": True, "mlp_only_layers": [0]},
    # GPT-2 style (gelu, LayerNorm, biases, learned positions), top-1 routing every other layer.
    "gpt-moe": {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 128,
                "n_experts": 4, "top_k": 1, "moe_every": 2},
    # DeepSeek-V3's attention: query and key/value latents, values narrower than queries.
    "mla": LLAMA | {"q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                    "v_head_dim": 16},
    # DeepSeek-V2-Lite's: no query latent; attention biases.
    "mla-no-q-latent": LLAMA | {"kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                                "v_head_dim": 16, "attn_bias": True},
    # Both, as DeepSeek-V3 stacks them: a first dense layer, then two shared experts and top-2 of 8.
    "deepseek": LLAMA | {"n_layers": 3, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                         "qk_rope_head_dim": 8, "v_head_dim": 16, "n_experts": 8, "top_k": 2,
                         "d_ff_expert": 32, "n_shared_experts": 2, "first_dense_layers": 1},
    # gpt-oss's experts and router, biased; Qwen3-Next's gated attention (its sinks and DeltaNet aside).
    "biased-gated": LLAMA | {"n_experts": 4, "top_k": 2, "d_ff_expert": 64, "expert_bias": True,
                             "router_bias": True, "attn_output_gate": True},
    # gpt-oss's attention: a sink logit per head, grouped queries with biases; every other layer a
    # sliding window, which the probe attends to whole (as it does every window).
    "sinks": LLAMA | {"n_kv_heads": 2, "attention_sinks": True, "attn_bias": True, "sliding_window": 16,
                      "global_every": 2, "n_experts": 4, "top_k": 2, "d_ff_expert": 64, "expert_bias": True,
                      "router_bias": True},
    # Llama 4's: chunks of 12 tokens (not a divisor of the steps' lengths) on three layers of four, the
    # fourth global; experts with a shared one on every other layer.
    "chunked": LLAMA | {"n_layers": 4, "attention_chunk_size": 12, "global_every": 4, "n_experts": 4,
                        "top_k": 1, "d_ff_expert": 64, "n_shared_experts": 1, "d_ff_shared": 64,
                        "moe_every": 2},
    # Bamba's: Mamba-2 layers (8 heads of 16, 2 groups of state 16, chunks of 24 tokens) around an
    # attention layer, each with a gated MLP.
    "bamba": LLAMA | {"n_layers": 3, "layer_mixers": ["mamba2", "attention", "mamba2"], **MAMBA2},
    # Nemotron-H's: one block per layer (Mamba-2, a squared-ReLU MLP, attention, experts).
    "nemotron-h": LLAMA | {"n_layers": 4, "layer_mixers": ["mamba2", "none", "attention", "none"],
                           "mlp_free_layers": [0, 2], "mlp": "relu2", "n_experts": 4, "top_k": 2,
                           "d_ff_expert": 64, "n_shared_experts": 1, "d_ff_shared": 64,
                           "mlp_only_layers": [1], "ssm_proj_bias": True, **MAMBA2},
    # Jamba's: Mamba-1 layers (RMSNorms on dt, B and C) around an attention layer, experts on every
    # other layer.
    "jamba": LLAMA | {"n_layers": 3, "layer_mixers": ["mamba", "attention", "mamba"], "ssm_inner": 128,
                      "ssm_state_size": 16, "ssm_dt_rank": 4, "ssm_dt_bc_norms": True, "n_experts": 4,
                      "top_k": 2, "d_ff_expert": 64, "moe_every": 2},
    # Qwen3-Next's: gated DeltaNet layers (2 key heads, 4 value heads) around gated attention, experts
    # with a gated shared expert.
    "qwen3-next": LLAMA | {"n_layers": 3, "layer_mixers": ["gated_delta_net", "attention", "gated_delta_net"],
                           "linear_key_heads": 2, "linear_value_heads": 4, "linear_key_head_dim": 16,
                           "linear_value_head_dim": 16, "attn_output_gate": True, "qk_norm": "head",
                           "n_kv_heads": 2, "n_experts": 4, "top_k": 2, "d_ff_expert": 64,
                           "n_shared_experts": 1, "d_ff_shared": 64, "shared_expert_gate": True},
    # Falcon-H1's: attention and Mamba-2 side by side on one norm, no gated norm, a biased out_proj.
    "falcon-h1": LLAMA | {"n_layers": 2, "layer_mixers": ["attention_mamba2"] * 2, "ssm_norm": False,
                          "ssm_out_bias": True, **MAMBA2},
}
NAMES = list(CONFIGS)


def engine(name: str) -> TransformerConfig:
    cfg = dict(CONFIGS[name])
    for field in ("mlp_only_layers", "layer_mixers", "mlp_free_layers"):
        cfg[field] = tuple(cfg.get(field, ()))
    return TransformerConfig(**cfg)


@pytest.mark.parametrize("name", NAMES)
# SGD's peak is AdamW's less the moments; the per-layer test below checks the activations.
@pytest.mark.parametrize("precision,optimizer", [("fp32", "adamw"), ("bf16_autocast", "adamw")])
def test_train_step_predicts_peak_memory_within_10_percent(name, precision, optimizer):
    """Measured: peak live tensor bytes over a real step (LiveBytes), forward, backward and
    optimizer step; 4 x 128 tokens, so activations are a large share of the peak."""
    result = train_step.run(QUICK | {"model": CONFIGS[name], "batch_size": 4, "seq_len": 128,
                                     "optimizer": optimizer, "precision": precision, "steps": 1,
                                     "warmup_steps": 1}, quiet)
    mem = result["memory"]
    assert abs(mem["relative_error"]) < 0.10, mem
    assert mem["predicted"]["activations"] > 0.15 * mem["measured_peak_allocated"]
    assert result["loss_last"] < result["loss_first"]


@pytest.mark.parametrize("name", NAMES)
def test_train_step_flops_and_params_match_torch(name):
    """FlopCounterMode counts the probe's step (attention through the math kernel, which it
    can count), and its parameters sum to the count reported."""
    cfg = CONFIGS[name]
    result = train_step.run(QUICK | {"model": cfg, "batch_size": 2, "seq_len": 32, "steps": 1,
                                     "warmup_steps": 1}, quiet)
    torch.manual_seed(0)
    model = Transformer(engine(name))
    assert result["params"] == sum(p.numel() for p in model.parameters())
    ids = torch.randint(cfg["vocab_size"], (2, 32))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        logits = model(ids)
        F.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    # FlopCounterMode counts a depthwise convolution's weight gradient as a dense one.
    assert result["flops_per_step"] == counter.get_total_flops() - depthwise_excess(engine(name), 2, 32)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_each_layer_saves_what_the_itemized_prediction_says(api, name, precision, dtype):
    """Per layer, of each kind (dense or routed, attention or a state-space mixer, with or without
    an MLP), the saved tensors autograd keeps match the items; what is left out is a few floats per
    token (norms' rstd, attention's log-sum-exp, rope tables)."""
    cfg = engine(name)
    body = api.ok(TRAINING, {"model": CONFIGS[name], "batch_size": 4, "seq_len": 128, "precision": precision,
                             "recompute": "selective"})
    detail = body["activation_detail"]
    measured = saved_bytes_per_layer(cfg, 4, 128, dtype)
    predicted = {i: kind["per_layer_total"] for kind in detail["layer_kinds"] for i in kind["layers"]}
    assert sorted(predicted) == list(range(cfg.n_layers))
    for i, moe in enumerate(cfg.moe_layers):
        left_out = measured[i] - predicted[i]  # within 2.5%, or 64 bytes (16 floats) a token
        assert 0 <= left_out <= max(0.025 * measured[i], 64 * 4 * 128), (i, moe)


def test_experts_compute_what_transformers_mixtral_block_computes():
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    torch.manual_seed(0)
    ref = MixtralSparseMoeBlock(MixtralConfig(hidden_size=64, intermediate_size=32, num_local_experts=4,
                                              num_experts_per_tok=2, vocab_size=100)).double()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.1)
    ours = Experts(TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100, n_experts=4, top_k=2,
                                     d_ff_expert=32, mlp="swiglu")).double()
    with torch.no_grad():
        ours.router.weight.copy_(ref.gate.weight)
        for e, expert in enumerate(ours.experts):
            expert.up.weight.copy_(ref.experts.gate_up_proj[e])  # gate rows, then up rows
            expert.down.weight.copy_(ref.experts.down_proj[e])
    x = torch.randn(2, 24, 64, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x))


def test_shared_experts_compute_what_transformers_qwen2_moe_block_computes():
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    torch.manual_seed(0)
    ref = Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
        hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8,
        num_experts_per_tok=2, norm_topk_prob=True, vocab_size=100)).double()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.1)
    ours = Experts(TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100, n_experts=8, top_k=2,
                                     d_ff_expert=32, n_shared_experts=1, d_ff_shared=48,
                                     shared_expert_gate=True, mlp="swiglu")).double()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    with torch.no_grad():
        ours.router.weight.copy_(ref.gate.weight)
        for e, expert in enumerate(ours.experts):
            expert.up.weight.copy_(ref.experts.gate_up_proj[e])
            expert.down.weight.copy_(ref.experts.down_proj[e])
        shared = ref.shared_expert
        ours.shared.up.weight.copy_(torch.cat([shared.gate_proj.weight, shared.up_proj.weight]))
        ours.shared.down.weight.copy_(shared.down_proj.weight)
        ours.shared_gate.weight.copy_(ref.shared_expert_gate.weight)
    x = torch.randn(2, 24, 64, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x))


@pytest.mark.parametrize("q_lora_rank", [48, None])
def test_latent_attention_computes_what_transformers_deepseek_v3_attention_computes(q_lora_rank):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )
    torch.manual_seed(0)
    widths = dict(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  q_lora_rank=q_lora_rank)
    hf = DeepseekV3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, rope_interleave=False,
                          attention_bias=True, vocab_size=100, **widths)
    hf._attn_implementation = "sdpa"
    ref = DeepseekV3Attention(hf, 0).double()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.1)
    ours = LatentAttention(TransformerConfig(n_layers=1, d_model=64, n_heads=4, vocab_size=100,
                                             norm="rmsnorm", position="rope", **widths)).double()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    with torch.no_grad():
        if q_lora_rank:  # the query latent's and the key/value latent's projections, fused
            ours.down.weight.copy_(torch.cat([ref.q_a_proj.weight, ref.kv_a_proj_with_mqa.weight]))
            ours.down.bias.copy_(torch.cat([ref.q_a_proj.bias, ref.kv_a_proj_with_mqa.bias]))
            ours.q_norm.weight.copy_(ref.q_a_layernorm.weight)
            ours.q_up.weight.copy_(ref.q_b_proj.weight)
        else:
            ours.down.weight.copy_(torch.cat([ref.q_proj.weight, ref.kv_a_proj_with_mqa.weight]))
            ours.kv_bias.copy_(ref.kv_a_proj_with_mqa.bias)
        ours.kv_norm.weight.copy_(ref.kv_a_layernorm.weight)
        ours.kv_up.weight.copy_(ref.kv_b_proj.weight)
        ours.out.weight.copy_(ref.o_proj.weight)
        ours.out.bias.copy_(ref.o_proj.bias)
    x = torch.randn(2, 24, 64, dtype=torch.float64)
    cos, sin = DeepseekV3RotaryEmbedding(hf)(x, torch.arange(24)[None])
    expected = ref(x, (cos.double(), sin.double()), None)[0]
    # transformers computes its rope tables in float32, hence the tolerance.
    torch.testing.assert_close(ours(x, rope_tables(24, 8, x.device), 0.0), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("field,given", [
    ("attn_logit_softcapping", {"attn_logit_softcapping": 50.0}),
    ("final_logit_softcapping", {"final_logit_softcapping": 30.0}),
    ("norm_layout", {"layer_mixers": ["attention", "none"], "mlp_free_layers": [0], "norm_layout": "post"}),
])
def test_the_probe_refuses_what_it_does_not_build(field, given):
    """A model the probe would build differently from its config is refused, naming the field,
    rather than measured as something else."""
    from app.accounting.errors import InvalidInput
    from app.probes.train_step import predict
    from app.probes.train_step.params import TrainStepParams
    params = TrainStepParams.model_validate({"model": LLAMA | given})
    with pytest.raises(InvalidInput) as refused:
        predict.train_step(params, False)
    assert refused.value.field == f"params.model.{field}"
