"""Llama 4's families, as transformers 5.23 builds them:
- llama4_text (Llama 4 Scout and Maverick's text model, Llama4ForCausalLM): the layers in
  moe_layers (default every interleave_moe_layer_step-th) route to experts of intermediate_size
  beside one shared expert of the same width; the others are dense MLPs of intermediate_size_mlp.
  Its q/k L2 norms have no weights. Its rope layers attend in chunks of attention_chunk_size and every
  no_rope_layer_interval-th layer globally without rope: no parameters, and the eager attention
  FLOPs count every score; a chunk is not a sliding window, so the import counts the chunked
  layers as full attention and says that FLOPs with causal='halved' and the KV cache are then
  upper bounds.
- llama4 (Llama4ForConditionalGeneration): the same text model from text_config; its vision tower
  and projector (vision_config) are not counted, and a warning says so.
"""

from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import nested
from app.accounting.hf.family import Family
from app.accounting.hf.moe import MIXTRAL_KEYS, MIXTRAL_NAMES, common, gated, head_width, nullable
from app.accounting.hf.values import alias, boolean, integer


def _llama4_text(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(raw, dict(num_hidden_layers=48, hidden_size=5120, num_attention_heads=40,
                               vocab_size=202048, intermediate_size=8192, max_position_embeddings=4096 * 32))
    n, expert = fields["n_layers"], fields["d_ff"]
    step = integer(raw, "interleave_moe_layer_step", 1)
    if step < 1:
        raise InvalidInput("interleave_moe_layer_step", f"must be 1 or more, got {step}")
    routed = raw.get("moe_layers")
    if routed is None:
        routed = list(range(step - 1, n, step))
    elif not isinstance(routed, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in routed):
        raise InvalidInput("moe_layers", f"must be a list of layer indices, got {routed!r}"[:120])
    dense = tuple(i for i in range(n) if i not in set(routed))
    if len(dense) == n:
        raise InvalidInput("moe_layers", "names no layer of the model: Llama 4 routes in at least one")
    # Every step-th layer (its default): said as a step, as Qwen's decoder_sparse_step is.
    layout = (dict(moe_every=step) if sorted(set(routed)) == list(range(step - 1, n, step))
              else dict(mlp_only_layers=dense))
    types = raw.get("layer_types") or []
    chunk = nullable(raw, "attention_chunk_size", 8192)
    if chunk is not None and (not types or "chunked_attention" in types):
        warnings.append(f"chunked attention (attention_chunk_size {chunk}) on the rope layers is counted as "
                        "full attention: no parameters, and eager FLOPs count every score either way; "
                        "with causal='halved', and in the KV cache, its figures are upper bounds")
    kv = nullable(raw, "num_key_value_heads", 8)
    return fields | dict(
        n_kv_heads=kv or fields["n_heads"], head_dim=nullable(raw, "head_dim", 128) or head_width({}, fields),
        mlp=gated(raw, warnings), attn_bias=boolean(raw, "attention_bias", False),
        d_ff=integer(raw, "intermediate_size_mlp", 16384),
        n_experts=alias(raw, "num_local_experts", "num_experts", 16),
        top_k=nullable(raw, "num_experts_per_tok", 1),
        d_ff_expert=expert, n_shared_experts=1, d_ff_shared=expert, **layout)


def _llama4(raw: dict, warnings: list[str]) -> dict[str, Any]:
    """Llama4Config: the text model Llama4ForConditionalGeneration builds from text_config."""
    return nested.text_model(raw, LLAMA4_TEXT, warnings)


LLAMA4_TEXT = Family("llama4_text", _llama4_text,
                     MIXTRAL_KEYS | {"attention_bias", "interleave_moe_layer_step", "moe_layers",
                                     "intermediate_size_mlp", "use_qk_norm", "layer_types"},
                     {**MIXTRAL_NAMES, "d_ff": "intermediate_size_mlp", "attn_bias": "attention_bias",
                      "mlp_only_layers": "moe_layers", "moe_every": "interleave_moe_layer_step"})

FAMILIES: tuple[Family, ...] = (
    LLAMA4_TEXT,
    # The vision tower is not counted (a warning says so), so vision_config is read, not refused.
    Family("llama4", _llama4, frozenset(("tie_word_embeddings", "text_config", "vision_config")),
           {k: "text_config." + v for k, v in LLAMA4_TEXT.key_names.items()}),
)
