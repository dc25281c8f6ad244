"""KV cache bytes against the cache transformers 5.23 holds after a real forward: tiny randomly
initialised models on the CPU, a prompt then a few decode steps, the DynamicCache's key and value
tensors summed layer by layer. Each config is read by Tally's import from the very dict
transformers builds from, so the config mapping is checked too.

transformers' windowed layers (DynamicSlidingWindowLayer) keep window - 1 tokens between
forwards, as views of the window they concatenated; Tally's convention keeps min(context, window)
(the window - 1 the next query reads plus the token being written, which is also what vLLM holds
with block_size 1). The tests assert both: the storage equals Tally's bytes, the views one token
per windowed layer fewer once the context reaches the window.

Falcon with new_decoder_architecture caches K and V broadcast to every query head: Tally's
engine "transformers" equals that cache; its default, vLLM's, keeps the key/value heads.
"""


import pytest
from transformers import AutoConfig
from transformers.models.deepseek_v3 import modeling_deepseek_v3

from app.accounting.hf import import_config
from app.accounting.inference.kv_cache import kv_cache
from tests.support.api import assert_names_field
from tests.support.hf_generate import BATCH, generate

_BASE = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 256}
LLAMA = _BASE | {"model_type": "llama", "num_key_value_heads": 2}
FALCON = {"model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "new_decoder_architecture": False, "multi_query": True, "bias": False,
          "alibi": False, "max_position_embeddings": 256}
FALCON_NEW = FALCON | {"new_decoder_architecture": True, "num_kv_heads": 2}
GEMMA2 = _BASE | {"model_type": "gemma2", "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16,
                  "sliding_window": 8}
MISTRAL = _BASE | {"model_type": "mistral", "num_key_value_heads": 1, "sliding_window": 8}
# Layers 0 and 2 slide, 1 and 3 attend globally; use_bidirectional_attention makes the window
# 8 // 2 + 1 (Gemma3TextConfig.__post_init__).
GEMMA3 = _BASE | {"model_type": "gemma3_text", "num_hidden_layers": 4, "num_key_value_heads": 2,
                  "head_dim": 16, "sliding_window": 8, "sliding_window_pattern": 2}
GEMMA3_BIDIRECTIONAL = GEMMA3 | {"use_bidirectional_attention": True}
# gpt-oss: layers 0 and 2 slide, 1 and 3 attend globally (its default layer_types); its sinks add no cache.
GPT_OSS = _BASE | {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16,
                   "sliding_window": 8, "num_local_experts": 4, "num_experts_per_tok": 2}
# Llama 4: layers 0 and 2 attend in aligned 8-token chunks, 1 and 3 globally (no_rope_layer_interval 2);
# transformers caches a chunked layer as an 8-token sliding window.
LLAMA4 = _BASE | {"model_type": "llama4_text", "num_hidden_layers": 4, "num_key_value_heads": 2,
                  "head_dim": 16,
                  "intermediate_size_mlp": 96, "num_local_experts": 4, "num_experts_per_tok": 1,
                  "interleave_moe_layer_step": 2, "attention_chunk_size": 8, "no_rope_layer_interval": 2}
DEEPSEEK_V3 = _BASE | {"model_type": "deepseek_v3", "num_key_value_heads": 4, "kv_lora_rank": 32,
                       "q_lora_rank": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
                       "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
                       "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}


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


def hf_window(raw: dict) -> int:
    """The sliding window transformers' config holds once built from `raw`."""
    return AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"}
                                ).sliding_window


# gemma2 and gemma3 alternate (layer 0 windowed, layer 1 global); mistral windows every layer.
@pytest.mark.parametrize(("raw", "kinds"), [(GEMMA2, (2, 2)), (MISTRAL, (0, 2)), (GEMMA3, (2, 2)),
                                            (GEMMA3_BIDIRECTIONAL, (2, 2)), (GPT_OSS, (2, 2))],
                         ids=["gemma2", "mistral", "gemma3", "gemma3-bidirectional", "gpt-oss"])
@pytest.mark.parametrize(("prompt", "steps"), [(5, 1), (6, 2), (13, 3), (20, 5)])
def test_windowed_layers_stop_at_the_window(raw, kinds, prompt, steps):
    cfg = import_config(raw).config
    context, window = prompt + steps, hf_window(raw)  # gemma3-bidirectional: 5
    ours = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", block_size=None)
    assert (ours.full_layers, ours.windowed_layers) == kinds
    assert ours.tokens_windowed == min(context, window)
    views, storage = held(generate(raw, "float32", prompt, steps))
    assert storage == ours.total_bytes
    per_token_layer = ours.values_per_token_per_layer * ours.bytes_per_element * BATCH
    kept = min(context, window - 1)  # transformers' views between forwards
    assert views == per_token_layer * (ours.full_layers * context + ours.windowed_layers * kept)


@pytest.mark.parametrize(("prompt", "steps"), [(5, 1), (6, 2), (13, 3), (20, 5)])
def test_chunked_layers_keep_a_chunk(prompt, steps):
    """Llama 4's chunked layers: transformers keeps each as a sliding window of the chunk, so during
    the step its storage is min(context, chunk) tokens, the most vLLM holds (the current chunk)."""
    cfg = import_config(LLAMA4).config
    context = prompt + steps
    ours = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", block_size=None,
                    engine="transformers")
    assert (ours.full_layers, ours.windowed_layers, ours.chunked_layers, ours.chunk) == (2, 0, 2, 8)
    assert ours.tokens_chunked == min(context, 8)
    views, storage = held(generate(LLAMA4, "float32", prompt, steps))
    assert storage == ours.total_bytes
    per_token_layer = ours.values_per_token_per_layer * ours.bytes_per_element * BATCH
    assert views == per_token_layer * (2 * context + 2 * min(context, 7))


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


@pytest.mark.parametrize(("prompt", "steps"), [(10, 0), (7, 3)])
def test_falcon_new_decoder_architecture_caches_every_query_head(prompt, steps):
    cfg = import_config(FALCON_NEW).config
    context = prompt + steps
    cache = generate(FALCON_NEW, "float32", prompt, steps)
    # FalconAttention broadcasts the 2 key/value heads to the 4 query heads before its cache update.
    assert [tuple(layer.keys.shape) for layer in cache.layers] == [(BATCH, 4, context, 16)] * 2
    # engine transformers: unpaged (vLLM's default block_size is not read), all 4 heads.
    ours = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", engine="transformers")
    assert (ours.engine, ours.heads, ours.block_size) == ("transformers", 4, None)
    assert held(cache) == (ours.total_bytes, ours.total_bytes)
    # vLLM keeps the 2 key/value heads: half of transformers' bytes.
    vllm = kv_cache(cfg, context=context, batch=BATCH, model_dtype="float32", block_size=None)
    assert (vllm.engine, vllm.heads, vllm.values_per_token_per_layer) == ("vllm", 2, 2 * 2 * 16)
    assert 2 * vllm.total_bytes == ours.total_bytes


def test_the_serving_calculators_answer_either_engine(api):
    config = api.ok("/api/v1/models/import", FALCON_NEW)["config"]
    body = {"model": config, "gpu": "h100-sxm", "dtype": "float32", "context": 10, "concurrency": BATCH}
    measured, _ = held(generate(FALCON_NEW, "float32", 10, 0))
    hf = api.ok("/api/v1/inference/memory", body | {"engine": "transformers"})["kv_cache"]
    assert (hf["engine"], hf["heads"], hf["block_size"]) == ("transformers", 4, None)
    assert hf["total_bytes"] == measured
    vllm = api.ok("/api/v1/inference/memory", body)["kv_cache"]  # default: vLLM, paged in 16-token blocks
    assert (vllm["engine"], vllm["heads"], vllm["block_size"]) == ("vllm", 2, 16)
    assert vllm["total_bytes"] == measured // 2 // 10 * 16
    # transformers' DynamicCache holds the model's dtype: an fp8 cache is vLLM's alone.
    refused = api.post("/api/v1/inference/memory", body | {"engine": "transformers", "cache_dtype": "fp8"})
    assert_names_field(refused, "cache_dtype")
