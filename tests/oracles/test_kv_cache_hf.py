"""KV cache bytes against the cache transformers 5.23 holds after a real forward: tiny randomly
initialised models on the CPU, a prompt then a few decode steps, the DynamicCache's key and value
tensors summed layer by layer. Each config is read by Tally's import from the very dict
transformers builds from, so the config mapping is checked too.

transformers' windowed layers (DynamicSlidingWindowLayer) keep window - 1 tokens between
forwards, as views of the window they concatenated; Tally's convention keeps min(context, window)
(the window - 1 the next query reads plus the token being written, which is also what vLLM holds
with block_size 1). The tests assert both: the storage equals Tally's bytes, the views one token
per windowed layer fewer once the context reaches the window.
"""


import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.deepseek_v3 import modeling_deepseek_v3

from app.accounting.hf import import_config
from app.accounting.inference.kv_cache import kv_cache

BATCH = 2
_BASE = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 256}
LLAMA = _BASE | {"model_type": "llama", "num_key_value_heads": 2}
FALCON = {"model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "new_decoder_architecture": False, "multi_query": True, "bias": False,
          "alibi": False, "max_position_embeddings": 256}
GEMMA2 = _BASE | {"model_type": "gemma2", "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16,
                  "sliding_window": 8}
MISTRAL = _BASE | {"model_type": "mistral", "num_key_value_heads": 1, "sliding_window": 8}
DEEPSEEK_V3 = _BASE | {"model_type": "deepseek_v3", "num_key_value_heads": 4, "kv_lora_rank": 32,
                       "q_lora_rank": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
                       "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
                       "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def generate(raw: dict, dtype: str, prompt: int, steps: int):
    """The DynamicCache after a forward over `prompt` random tokens and `steps` greedy steps."""
    torch.manual_seed(0)
    body = {k: v for k, v in raw.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(raw["model_type"], **body))
    model = model.to(DTYPES[dtype]).eval()
    with torch.no_grad():
        out = model(torch.randint(0, raw["vocab_size"], (BATCH, prompt)), use_cache=True)
        for _ in range(steps):
            out = model(out.logits[:, -1:].argmax(-1), past_key_values=out.past_key_values, use_cache=True)
    return out.past_key_values


def held(cache) -> tuple[int, int]:
    """(bytes the key/value tensors span, bytes of the storage behind them), over all layers."""
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(t.nbytes for t in tensors), sum(storages.values())


@pytest.mark.parametrize(("raw", "dtype", "heads"), [(LLAMA, "bfloat16", 2), (FALCON, "float32", 1),
                                                      (LLAMA, "float16", 2)])
@pytest.mark.parametrize(("prompt", "steps"), [(10, 0), (7, 3)])
def test_full_attention_cache(raw, dtype, heads, prompt, steps):
    cfg = import_config(raw).config
    ours = kv_cache(cfg, context=prompt + steps, batch=BATCH, model_dtype=dtype, block_size=None)
    assert ours.heads == heads  # falcon's multi_query: one key/value head
    assert held(generate(raw, dtype, prompt, steps)) == (ours.total_bytes, ours.total_bytes)


# gemma2 alternates (layer 0 windowed, layer 1 global); mistral windows every layer.
@pytest.mark.parametrize(("raw", "kinds"), [(GEMMA2, (2, 2)), (MISTRAL, (0, 2))], ids=["gemma2", "mistral"])
@pytest.mark.parametrize(("prompt", "steps"), [(5, 1), (6, 2), (13, 3), (20, 5)])
def test_windowed_layers_stop_at_the_window(raw, kinds, prompt, steps):
    cfg = import_config(raw).config
    context, window = prompt + steps, raw["sliding_window"]
    ours = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", block_size=None)
    assert (ours.full_layers, ours.windowed_layers) == kinds
    assert ours.tokens_windowed == min(context, window)
    views, storage = held(generate(raw, "float32", prompt, steps))
    assert storage == ours.total_bytes
    per_token_layer = ours.values_per_token_per_layer * ours.bytes_per_element * BATCH
    kept = min(context, window - 1)  # transformers' views between forwards
    assert views == per_token_layer * (ours.full_layers * context + ours.windowed_layers * kept)


@pytest.mark.parametrize(("prompt", "steps"), [(10, 0), (6, 4)])
def test_deepseek_v3_latent_and_decompressed(prompt, steps, monkeypatch):
    cfg = import_config(DEEPSEEK_V3).config
    expanded: dict[int, int] = {}
    original = modeling_deepseek_v3.DeepseekV3Attention.expand_kv

    def spy(self, kv_nope, k_rot):
        # The per-head keys [b, n_heads, s, nope + rope] and values [b, n_heads, s, v] attention
        # reads: what transformers 4.x kept in its cache, and what "decompressed" counts.
        key, value = original(self, kv_nope, k_rot)
        expanded[self.layer_idx] = key.nbytes + value.nbytes
        return key, value

    monkeypatch.setattr(modeling_deepseek_v3.DeepseekV3Attention, "expand_kv", spy)
    cache = generate(DEEPSEEK_V3, "float32", prompt, steps)
    context = prompt + steps
    latent = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", block_size=None)
    # transformers 5.23 caches the latent itself: keys [b, 1, s, kv_lora_rank], values [b, 1, s, rope].
    assert [tuple(layer.keys.shape[-3:]) for layer in cache.layers] == [(1, context, 32)] * 2
    assert held(cache) == (latent.total_bytes, latent.total_bytes)
    wide = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", block_size=None,
                    mla_cache="decompressed")
    assert sum(expanded.values()) == wide.total_bytes
