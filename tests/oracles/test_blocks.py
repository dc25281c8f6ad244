"""Each block kind (app/accounting/blocks/) against the transformers module it describes, layer by
layer: the kind transformers builds there, the block's parameters and matrices (names, shapes),
its forward matmul FLOPs (FlopCounterMode, per module), what one token adds to the cache
(DynamicCache), and, for the MLP kinds, the tensors autograd keeps (saved-tensor hooks).

Small configs of each family, built with real weights on the CPU and eager attention (which
scores every (query, key) pair: the blocks' causal="full").
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting import blocks
from app.accounting.blocks.base import score_pairs_doubled
from app.accounting.hf import import_config
from app.accounting.training import activations as act

SMALL = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
         "max_position_embeddings": 64}
CONFIGS = {
    # grouped-query attention with biases on every projection, a gated MLP with biases
    "llama": SMALL | {"model_type": "llama", "num_key_value_heads": 2, "num_hidden_layers": 2,
                      "attention_bias": True, "mlp_bias": True},
    # every layer in a 16-token window
    "mistral": SMALL | {"model_type": "mistral", "num_key_value_heads": 1, "num_hidden_layers": 2,
                        "sliding_window": 16},
    # local and global layers, per-head q/k norms, a GeGLU MLP
    "gemma3_text": SMALL | {"model_type": "gemma3_text", "num_key_value_heads": 2, "head_dim": 16,
                            "num_hidden_layers": 3, "sliding_window": 4, "sliding_window_pattern": 2},
    # multi-head attention and a two-matrix MLP, fused query_key_value
    "gpt_neox": SMALL | {"model_type": "gpt_neox", "num_hidden_layers": 2},
    # a dense first layer, then experts with a gated shared expert
    "qwen2_moe": SMALL | {"model_type": "qwen2_moe", "num_key_value_heads": 2, "num_hidden_layers": 2,
                          "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                          "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [0]},
    # latent attention; a dense first layer, then routed and shared experts
    "deepseek_v3": SMALL | {"model_type": "deepseek_v3", "num_key_value_heads": 4, "num_hidden_layers": 2,
                            "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
                            "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 24,
                            "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
                            "n_group": 1, "topk_group": 1},
}
# transformers' attribute names for the blocks' modules (app/accounting/blocks/base.py Weight.module).
HF_NAMES = {"q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("o_proj", "dense"),
            "qkv": ("query_key_value",), "gate": ("gate_proj",), "up": ("up_proj", "dense_h_to_4h"),
            "down": ("down_proj", "dense_4h_to_h"), "router": ("gate",),
            "shared_gate": ("shared_expert_gate",),
            "experts_gate_up": ("experts.gate_up_proj",), "experts_down": ("experts.down_proj",),
            "mla_q": ("q_proj",), "mla_q_a": ("q_a_proj",), "mla_q_b": ("q_b_proj",),
            "mla_kv_a": ("kv_a_proj_with_mqa",), "mla_kv_b": ("kv_b_proj",)}
SHARED = ("shared_expert", "shared_experts")
BATCH, SEQ = 2, 8


def _build(name: str):
    body = dict(CONFIGS[name])
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    torch.manual_seed(0)
    # q @ k^T and softmax @ v as matmuls, every pair scored; experts as one matmul pair per expert
    # on its tokens (transformers/integrations/moe.py), which FlopCounterMode counts
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             experts_implementation="eager").eval()
    return model, cfg, import_config(CONFIGS[name]).config


@pytest.fixture(scope="module", params=list(CONFIGS))
def built(request):
    model, hf_cfg, cfg = _build(request.param)
    ids = torch.randint(0, SMALL["vocab_size"], (BATCH, SEQ))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(ids, use_cache=True)
    return request.param, model, hf_cfg, cfg, counter.get_flop_counts(), out.past_key_values


def _sublayers(layer: torch.nn.Module) -> tuple[str, str]:
    """(attention's attribute name, the MLP's) in a transformers decoder layer."""
    return ("self_attn" if hasattr(layer, "self_attn") else "attention"), "mlp"


def test_each_layer_gets_the_kind_transformers_builds(built):
    name, model, hf_cfg, cfg, _, _ = built
    types = getattr(hf_cfg, "layer_types", None)
    for i, (hf_layer, layer) in enumerate(zip(model.base_model.layers, blocks.layers(cfg), strict=True)):
        attn, mlp = (getattr(hf_layer, a) for a in _sublayers(hf_layer))
        inner = layer.attention.inner if isinstance(layer.attention, blocks.Windowed) else layer.attention
        assert isinstance(inner, blocks.LatentAttention) == hasattr(attn, "kv_a_proj_with_mqa"), (name, i)
        windowed = types[i] == "sliding_attention" if types else bool(getattr(hf_cfg, "sliding_window", None))
        assert (layer.attention.window is not None) == windowed, (name, i)
        if windowed:
            assert layer.attention.window == hf_cfg.sliding_window
        assert layer.mlp.routes == hasattr(mlp, "experts"), (name, i)
        expert_mlp = getattr(mlp, "shared_expert", getattr(mlp, "shared_experts", mlp))
        gated = hasattr(expert_mlp, "gate_proj") or hasattr(expert_mlp, "gate_up_proj")
        kind = layer.mlp.expert if layer.mlp.routes else layer.mlp
        assert isinstance(kind, blocks.GatedMlp) == gated, (name, i)


def _hf_weight(module: torch.nn.Module, module_name: str) -> torch.Tensor:
    """The weight of the transformers module (or 3-D parameter) a block's module names."""
    for attr in HF_NAMES[module_name]:
        target = module
        try:
            for part in attr.split("."):
                target = getattr(target, part)
        except AttributeError:
            continue
        return target if isinstance(target, torch.nn.Parameter) else target.weight
    raise AssertionError(f"no {module_name} in {type(module).__name__}")


def test_parameters_and_matrices_are_transformers_own(built):
    """Each block's parameter count is its transformers module's, and each matrix it lists has that
    module's shape: (out, in), or (experts, out, in) for routed experts' 3-D parameters."""
    name, model, _, cfg, _, _ = built
    for i, (hf_layer, layer) in enumerate(zip(model.base_model.layers, blocks.layers(cfg), strict=True)):
        for block, attr in zip((layer.attention, layer.mlp), _sublayers(hf_layer), strict=True):
            hf = getattr(hf_layer, attr)
            assert block.total_params == sum(p.numel() for p in hf.parameters()), (name, i, attr)
            for m in block.linears():
                # a mixture of experts' gate, up and down are its shared experts'
                shared = m.module in ("gate", "up", "down") and block.routes if block is layer.mlp else False
                owner = next(getattr(hf, s) for s in SHARED if hasattr(hf, s)) if shared else hf
                expected = (m.fan_out, m.fan_in) if m.experts == 1 else (m.experts, m.fan_out, m.fan_in)
                assert tuple(_hf_weight(owner, m.module).shape) == expected, (name, i, m)
        buffers = sum(b.numel() for n, b in hf_layer.named_buffers() if "e_score_correction_bias" in n)
        assert layer.mlp.buffers == buffers, (name, i)


def test_forward_flops_are_flop_counter_modes(built):
    """Per module, FlopCounterMode's count of one forward over 2 x 8 tokens, eager attention (every
    pair scored: causal 'full')."""
    name, model, _, cfg, counts, _ = built
    prefix = f"{type(model).__name__}.{model.base_model_prefix}.layers"
    for i, (hf_layer, layer) in enumerate(zip(model.base_model.layers, blocks.layers(cfg), strict=True)):
        attn, mlp = _sublayers(hf_layer)
        measured = {part: sum(counts[f"{prefix}.{i}.{attr}"].values()) for part, attr in
                    (("attention", attn), ("mlp", mlp))}
        ours = layer.attention.forward_flops(batch=BATCH, seq_len=SEQ, causal="full")
        assert sum(ours.values()) == measured["attention"], (name, i, ours)
        assert sum(layer.mlp.forward_flops(BATCH * SEQ).values()) == measured["mlp"], (name, i)


def test_cache_values_per_token_are_what_dynamic_cache_holds(built):
    """K and V per key/value head, or latent attention's latent and rotary key (transformers 5.23's
    DynamicCache holds the same two); a windowed layer keeps window - 1 tokens between forwards,
    the one being written making tokens_kept."""
    name, _, _, cfg, _, cache = built
    for i, (kept, layer) in enumerate(zip(cache.layers, blocks.layers(cfg), strict=True)):
        per_token = kept.keys.shape[1] * kept.keys.shape[3] + kept.values.shape[1] * kept.values.shape[3]
        assert layer.attention.cache(mla_cache="latent", tp=1).values == per_token, (name, i)
        tokens, window = kept.keys.shape[2], layer.attention.window
        if window is None or window > SEQ:
            assert tokens == SEQ == layer.attention.tokens_kept(SEQ), (name, i)
        else:
            assert tokens + 1 == layer.attention.tokens_kept(SEQ) == window, (name, i, tokens)


@pytest.mark.parametrize("name", ["llama", "gpt_neox"])
def test_mlp_saves_what_autograd_keeps(name):
    """The MLP's items (its norm's input aside, which the block before it owns) against the distinct
    storages autograd keeps through transformers' MLP: up's input, the hiddens, down's input."""
    model, _, cfg = _build(name)
    hf_mlp, mlp = model.base_model.layers[0].mlp, blocks.layers(cfg)[0].mlp
    x = torch.randn(BATCH, SEQ, cfg.d_model, requires_grad=True)
    params = {p.untyped_storage().data_ptr() for p in hf_mlp.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        hf_mlp(x)
    items = tuple(i for i in mlp.saved(act_bytes=4, residual_bytes=4) if i.name != "mlp/norm_input")
    assert len(kept) == len(items)
    assert sum(kept.values()) == sum(act.sized(items, s=SEQ, b=BATCH, t=1, sequence_parallel=False).values())


@pytest.mark.parametrize(("seq_len", "window"), [(64, 16), (64, 1), (16, 16), (10, 32)])
def test_a_window_scores_the_banded_causal_mask(seq_len, window):
    """halved counts S^2/2 pairs for the causal triangle (its diagonal's S/2 left out, the 6ND-era
    convention): in a window, the band's pairs less w/2 the same way."""
    band = torch.ones(seq_len, seq_len).tril().triu(-(window - 1)).sum().item()
    diagonal = min(window, seq_len)
    assert score_pairs_doubled(seq_len, window, "halved") == 2 * band - diagonal
    assert score_pairs_doubled(seq_len, window, "full") == 2 * seq_len * seq_len
