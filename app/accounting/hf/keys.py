"""Which config.json keys change a count, and which family honours which.

Read from transformers' configuration_*.py / modeling_*.py (5.23). A key is here when
some family builds different weights for different values of it, or routes each token
through a different number of them (num_experts_per_tok: active parameters and FLOPs),
or when it marks a family whose weights no other reader builds (Gemma's softcapping and
query_pre_attn_scalar), so a relabelled config is caught. A key the chosen family does
not read is refused (422 naming it) unless its value is the neutral one (null, 0, false,
[]; 1 for a step between MoE layers), or the very value the chosen family hard-wires
(mistral has no biases, so `attention_bias: false` is what it builds anyway).
"""

from collections.abc import Callable
from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf.family import Family
from app.accounting.models import TransformerConfig


def _none(value: Any) -> bool:
    return value is None


def _zero(value: Any) -> bool:
    return value is None or value is False or (type(value) is int and value == 0) or value == []


def _every_layer(value: Any) -> bool:
    # A step of 1 between MoE layers puts experts in every layer: what a family without the key builds.
    return value is None or (type(value) is int and value == 1)


def _zero_or_empty(value: Any) -> bool:
    return value is None or value == {}


def _attention_only(value: Any) -> bool:
    # Full and sliding-window layers hold the same weights; linear attention, mamba... do not.
    return value is None or (isinstance(value, list)
                             and all(v in ("full_attention", "sliding_attention") for v in value))


_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")

# key -> its neutral test. Comments name the families that build weights from it.
COUNT_KEYS: dict[str, Callable[[Any], bool]] = {
    # Shapes the supported families read (gpt2 spells some its own way).
    **dict.fromkeys(("hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads",
                     "n_head", "vocab_size", "max_position_embeddings", "n_positions"), _none),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads", "n_head_kv", "head_dim",
                     "intermediate_size", "n_inner", "ffn_hidden_size", "tie_word_embeddings"), _none),
    # Biases: llama (attention_bias, mlp_bias), gpt_neox (attention_bias), falcon (bias),
    # stablelm (use_qkv_bias), phi-3 and others.
    **dict.fromkeys(("attention_bias", "mlp_bias", "bias", "qkv_bias", "use_qkv_bias", "use_bias"), _none),
    # Falcon's spelling of hidden_size; gemma3's nested text model and its vision tower.
    "n_embed": _none,
    **dict.fromkeys(("text_config", "vision_config"), _zero_or_empty),
    # Mixture of experts: mixtral, qwen2_moe/qwen3_moe, deepseek_v2/v3, olmoe, llama4. The steps
    # between MoE layers: Qwen's decoder_sparse_step, llama4's interleave_moe_layer_step, and
    # moe_layer_freq (dots3_note, axk1, step3p7; DeepSeek's own code, but not transformers' deepseek).
    **dict.fromkeys(_EXPERTS, _zero),
    **dict.fromkeys(("num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
                     "shared_expert_intermediate_size", "first_k_dense_replace", "mlp_only_layers",
                     "moe_layers", "intermediate_size_mlp"), _zero),
    **dict.fromkeys(("decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_freq"), _every_layer),
    # Multi-token-prediction layers: nemotron_h_omni, step3p7 and inkling build them (deepseek_v3
    # reads the key and says in a warning that transformers does not build them).
    **dict.fromkeys(("num_nextn_predict_layers", "num_mtp_layers"), _zero),
    # Multi-head latent attention: deepseek_v2/v3.
    **dict.fromkeys(("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
                    _zero),
    # Gemma markers: gemma2/gemma3 put four norms in a block (gemma3 also q/k norms) and tie
    # embeddings by default, which no supported reader can build; these keys are theirs alone.
    **dict.fromkeys(("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                     "hidden_activation", "sliding_window_pattern", "_sliding_window_pattern"), _none),
    "layer_types": _attention_only,
    # q/k norms (cohere, llama4, persimmon, stablelm, phi) and other block layouts.
    **dict.fromkeys(("use_qk_norm", "qk_layernorm", "use_parallel_residual", "parallel_attn",
                     "new_decoder_architecture", "multi_query", "add_cross_attention",
                     "num_ln_in_parallel_attn"), _zero),
    # Recurrent and linear-attention hybrids (jamba, qwen3_next, falcon_h1, lfm2...).
    **dict.fromkeys(("attn_layer_period", "expert_layer_period", "mamba_d_state", "state_size",
                     "conv_kernel", "linear_num_key_heads", "linear_num_value_heads",
                     "full_attention_interval"), _none),
    # Their widths: qwen3_next's gated DeltaNet, bamba's (and falcon_h1's, granitemoehybrid's) Mamba-2.
    **dict.fromkeys(("linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
                     "mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups", "mamba_d_conv",
                     "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "mamba_dt_rank",
                     "attn_layer_offset", "expert_layer_offset"), _none),
    "attn_layer_indices": _zero,
    # nemotron_h's layer pattern and its own spellings of the Mamba-2 widths and the shared expert.
    **dict.fromkeys(("hybrid_override_pattern", "layers_block_type", "mamba_num_heads", "mamba_head_dim",
                     "ssm_state_size",
                     "n_groups", "chunk_size", "use_conv_bias", "moe_shared_expert_intermediate_size",
                     "moe_latent_size", "mamba_d_ssm", "mamba_rms_norm", "projectors_bias"), _none),
}

# Keys that never change a count, common in real config.json files: accepted silently.
KNOWN_HARMLESS = frozenset((
    "boi_token_index", "eoi_token_index", "image_token_index", "mm_tokens_per_image",
    "rope_local_base_freq", "embedding_dropout", "residual_dropout", "norm_epsilon", "mlp_type",
    "norm_type", "apply_residual_connection_post_layernorm",
    "model_type", "architectures", "auto_map", "_name_or_path", "transformers_version", "torch_dtype",
    "dtype", "quantization_config", "bos_token_id", "eos_token_id", "pad_token_id", "use_cache",
    "initializer_range", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "hidden_act",
    "activation_function", "activation", "rope_theta", "rope_scaling", "rope_parameters",
    "rope_interleave", "rotary_pct", "rotary_emb_base", "partial_rotary_factor", "rotary_dim",
    "original_max_position_embeddings", "attention_dropout", "hidden_dropout", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "classifier_dropout", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_ctx", "pretraining_tp",
    "sliding_window", "sliding_window_size", "use_sliding_window", "max_window_layers",
    "cache_implementation", "tokenizer_class", "task_specific_params", "id2label", "label2id",
    "problem_type", "is_decoder", "is_encoder_decoder", "output_attentions", "output_hidden_states",
    "return_dict", "chunk_size_feed_forward", "use_return_dict", "gradient_checkpointing",
    "norm_topk_prob", "routed_scaling_factor", "router_aux_loss_coef", "router_jitter_noise",
    "output_router_logits", "aux_loss_alpha", "seq_aux", "scoring_func", "topk_method", "ep_size",
    # DeepSeek's group-limited routing: which experts a token may pick, not how many exist.
    "n_group", "topk_group",
    # gpt-oss's clamped SwiGLU: its activation's constants, not its shapes; and two keys of OpenAI's
    # own code its config.json carries, which transformers does not read (experts_per_token repeats
    # num_experts_per_tok).
    "swiglu_limit", "swiglu_alpha", "experts_per_token", "initial_context_length",
    "alibi", "logit_scale", "clip_qkv", "attn_scale", "attn_temperature_tuning", "floor_scale",
    "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval", "use_bidirectional_attention",
    "qk_head_dim", "use_flash_attn", "_attn_implementation", "attn_implementation",
    # Mamba's time-step initialisation and kernels, and cache dtypes: values, not shapes. nemotron_h does not
    # read `expand` (its inner width is mamba_num_heads x mamba_head_dim).
    "time_step_min", "time_step_max", "time_step_limit", "time_step_floor", "mamba_dt_min", "mamba_dt_max",
    "mamba_dt_limit", "mamba_dt_init_floor", "mamba_hidden_act", "rescale_prenorm_residual",
    "residual_in_fp32", "mamba_ssm_cache_dtype", "moe_shared_expert_overlap", "num_logits_to_keep",
    "use_mamba_kernels", "expand",
    "mtp_layers_block_type", "z_loss_coefficient", "use_mambapy", "use_associative_scan", "mlp_hidden_act",
    # Falcon-H1's muP multipliers (scalars and a non-persistent buffer) and the gate's order.
    "lm_head_multiplier", "embedding_multiplier", "mlp_multipliers", "key_multiplier",
    "attention_out_multiplier", "attention_in_multiplier", "ssm_multipliers", "ssm_in_multiplier",
    "ssm_out_multiplier", "mamba_norm_before_gate",
))


def implied(cfg: TransformerConfig) -> dict[str, Any]:
    """What the chosen family builds, spelled as config.json keys: a key it does not read
    may still be given if it says exactly this."""
    r = cfg.resolved()
    same_attn = r.has_qkv_bias == r.has_attn_bias
    values = {"num_key_value_heads": r.kv_heads, "num_kv_heads": r.kv_heads, "n_head_kv": r.kv_heads,
              "head_dim": r.hd, "intermediate_size": r.ff, "n_inner": r.ff, "ffn_hidden_size": r.ff,
              "mlp_bias": r.has_mlp_bias, "tie_word_embeddings": r.tied_embeddings,
              "qkv_bias": r.has_qkv_bias, "use_qkv_bias": r.has_qkv_bias}
    if same_attn:
        values["attention_bias"] = r.has_attn_bias
        if r.has_attn_bias == r.has_mlp_bias:
            values["bias"] = r.has_attn_bias
    return values


def refused(raw: dict[str, Any], family: Family, cfg: TransformerConfig) -> list[str]:
    """Keys of `raw` that would change the count but that `family` does not read."""
    wired = implied(cfg)
    bad = []
    for key, value in raw.items():
        neutral = COUNT_KEYS.get(key)
        if neutral is None or key in family.honoured or neutral(value):
            continue
        if key in wired and type(value) is type(wired[key]) and value == wired[key]:
            continue
        bad.append(key)
    order = list(COUNT_KEYS)  # the table's order: expert counts before MoE details, etc.
    return sorted(bad, key=order.index)


def check(raw: dict[str, Any], family: Family, cfg: TransformerConfig, warnings: list[str]) -> None:
    """Refuse a key that would change the count and that `family` ignores; warn about
    keys no family Tally knows uses (assumed not to change the count)."""
    bad = refused(raw, family, cfg)
    if bad:
        listed = ", ".join(bad[:12])
        raise InvalidInput(bad[0], f"changes the parameter count, but model_type {family.model_type!r} "
                                   f"does not read it, so the count would be wrong (keys: {listed}); "
                                   "give the model_type that reads them, or drop keys the model lacks")
    unknown = sorted(k for k in raw if k not in COUNT_KEYS and k not in KNOWN_HARMLESS)
    if unknown:
        warnings.append("keys Tally does not know, assumed not to change the count: "
                        + ", ".join(k[:40] for k in unknown[:20]) + (" ..." if len(unknown) > 20 else ""))
