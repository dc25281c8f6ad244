"""Llama 4's families, as transformers 5.23 builds them:
- llama4_text (Llama 4 Scout and Maverick's text model, Llama4ForCausalLM): the layers in
  moe_layers (default every interleave_moe_layer_step-th) route to experts of intermediate_size
  beside one shared expert of the same width; the others are dense MLPs of intermediate_size_mlp.
  Its q/k L2 norms have no weights. Its rope layers attend in aligned chunks of attention_chunk_size
  (attention_chunk_size, blocks/chunked.py) and every no_rope_layer_interval-th layer globally
  without rope (global_every), as layer_types or no_rope_layers list them: no parameters.
- llama4 (Llama4ForConditionalGeneration): the same text model from text_config; its vision tower
  and projector (vision_config) are not counted, and a warning says so.
"""

from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import nested, windows
from app.accounting.hf.family import Family
from app.accounting.hf.moe import MIXTRAL_KEYS, MIXTRAL_NAMES, common, gated, head_width, nullable
from app.accounting.hf.values import alias, boolean, integer

CHUNKED = "chunked_attention"


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
    kv = nullable(raw, "num_key_value_heads", 8)
    return fields | dict(
        n_kv_heads=kv or fields["n_heads"], head_dim=nullable(raw, "head_dim", 128) or head_width({}, fields),
        mlp=gated(raw, warnings), attn_bias=boolean(raw, "attention_bias", False),
        d_ff=integer(raw, "intermediate_size_mlp", 16384),
        n_experts=alias(raw, "num_local_experts", "num_experts", 16),
        top_k=nullable(raw, "num_experts_per_tok", 1),
        d_ff_expert=expert, n_shared_experts=1, d_ff_shared=expert, **layout, **_chunks(raw, n))


def _chunks(raw: dict, n: int) -> dict[str, Any]:
    """attention_chunk_size and global_every from layer_types, else no_rope_layers (1: a rope layer,
    chunked), else every no_rope_layer_interval-th layer global (Llama4TextConfig's defaults)."""
    chunk = nullable(raw, "attention_chunk_size", 8192)
    types, key = raw.get("layer_types"), "layer_types"
    if types is None:
        key, rope = "no_rope_layers", raw.get("no_rope_layers")
        if not rope:
            key, every = "no_rope_layer_interval", integer(raw, "no_rope_layer_interval", 4)
            if every < 1:
                raise InvalidInput(key, f"must be 1 or more, got {every}")
            rope = [int((i + 1) % every != 0) for i in range(n)]
        if not isinstance(rope, list) or len(rope) != n or any(r not in (0, 1) for r in rope):
            raise InvalidInput("no_rope_layers", f"must list {n} entries (num_hidden_layers), each 0 or 1")
        types = [CHUNKED if r else windows.FULL for r in rope]
    if not isinstance(types, list) or len(types) != n or any(t not in (CHUNKED, windows.FULL) for t in types):
        raise InvalidInput("layer_types", f"must list {n} entries (num_hidden_layers), each {CHUNKED!r} or "
                                          f"{windows.FULL!r}")
    local = windows.windows([t == CHUNKED for t in types], chunk, key)
    if "sliding_window" in local:  # the pattern's reader names the span a window; here it is a chunk
        local["attention_chunk_size"] = local.pop("sliding_window")
    return local


def _llama4(raw: dict, warnings: list[str]) -> dict[str, Any]:
    """Llama4Config: the text model Llama4ForConditionalGeneration builds from text_config."""
    return nested.text_model(raw, LLAMA4_TEXT, warnings)


LLAMA4_TEXT = Family("llama4_text", _llama4_text,
                     MIXTRAL_KEYS | {"attention_bias", "interleave_moe_layer_step", "moe_layers",
                                     "intermediate_size_mlp", "use_qk_norm", "layer_types",
                                     "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval"},
                     {**MIXTRAL_NAMES, "d_ff": "intermediate_size_mlp", "attn_bias": "attention_bias",
                      "mlp_only_layers": "moe_layers", "moe_every": "interleave_moe_layer_step",
                      "attention_chunk_size": "attention_chunk_size", "global_every": "layer_types"})

FAMILIES: tuple[Family, ...] = (
    LLAMA4_TEXT,
    # The vision tower is not counted (a warning says so), so vision_config is read, not refused.
    Family("llama4", _llama4, frozenset(("tie_word_embeddings", "text_config", "vision_config")),
           {k: "text_config." + v for k, v in LLAMA4_TEXT.key_names.items()}),
)
