"""Hugging Face config.json -> TransformerConfig, offline, exact or refused.

Supported model_type values, read as their transformers classes read them (a
key's absence means that class's default): llama (LlamaConfig), mistral
(MistralConfig), qwen2 (Qwen2Config), gpt2 (GPT2Config), gpt_neox (GPTNeoXConfig).

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
