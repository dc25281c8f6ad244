"""Hugging Face config.json -> TransformerConfig, offline, exact or refused.

Supported model_type values, read as their transformers 5.23 classes read them (a
key's absence means that class's default), one registry entry (family.Family) each, grouped by
lineage: llama.py: llama, mistral, qwen2, qwen3, phi3, olmo, olmo2; gpt.py: gpt2, gpt_neox,
falcon, starcoder2; gemma.py: gemma, gemma2, gemma3_text, gemma3 (its text model); moe.py:
mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, glm4_moe; llama4.py: llama4_text,
llama4 (its text model); hybrid.py: qwen3_next, jamba; mamba2.py: bamba, nemotron_h, falcon_h1.

When `architectures` names another supported family's class (a Qwen3 config sent as
llama), the config is read both ways: a different count is a 422 naming architectures.
Every import answers the conventions its count rests on (conventions.py) as warnings.

An import never drops a key that changes a count. keys.COUNT_KEYS lists every
key that changes some family's weights (MoE, multi-head latent attention, Gemma's
extra norms, q/k norms, biases, hybrids...). One the chosen family does not read
is a 422 naming it, unless it holds the neutral value (null, 0, false, []) or
exactly what the family builds anyway (`attention_bias: false` for mistral).
Keys known not to change a count (rope_scaling, torch_dtype, bos_token_id...)
are accepted quietly; keys no known family uses are accepted and listed in a
warning, as assumed not to change the count.
"""

from app.accounting.hf.read import SUPPORTED, ImportedModel, import_config

__all__ = ["SUPPORTED", "ImportedModel", "import_config"]
