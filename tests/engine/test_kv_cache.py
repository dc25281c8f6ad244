"""KV cache bytes: the published figures, vLLM's block accounting replayed token by token, tensor
parallelism, the cache dtypes and the refusals."""

import pytest

from app.accounting.errors import InvalidInput
from app.accounting.inference import kv_cache as kv_cache_module
from app.accounting.inference.kv_cache import bytes_per_token, kv_cache
from app.accounting.models import preset


def test_llama2_70b_is_327680_bytes_per_token_in_fp16():
    # Published: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 (e.g. NVIDIA's
    # "Mastering LLM Techniques: Inference Optimization", the figure).
    cache = kv_cache(preset("llama2-70b"), context=1, cache_dtype="float16")
    assert cache.bytes_per_token == 327_680
    assert bytes_per_token(preset("llama2-70b"), cache_dtype="fp16") == 327_680


def test_deepseek_v3_latent_is_70272_bytes_per_token_in_bf16():
    # 61 layers x (512 latent + 64 rotary key) x 2 bytes (DeepSeek-V3 report; vLLM's MLA page).
    cache = kv_cache(preset("deepseek-v3"), context=1, model_dtype="bfloat16")
    assert (cache.layout, cache.values_per_token_per_layer, cache.bytes_per_token) == ("latent", 576, 70_272)


def test_llama2_7b_prompt_512_plus_32_generated_is_285212672_bytes():
    # llm-analysis gives 285,212,672 bytes for batch 1, 512 + 32 tokens, fp16.
    for block in (None, 1, 16):  # 544 = 34 blocks of 16: paging adds nothing
        cache = kv_cache(preset("llama2-7b"), context=512 + 32, cache_dtype="float16", block_size=block)
        assert cache.total_bytes == cache.bytes_per_gpu == 285_212_672


def test_deepseek_v3_decompressed_keeps_every_heads_keys_and_values():
    # transformers 4.x cached keys of 128 heads x (128 + 64) and values of 128 x 128.
    cache = kv_cache(preset("deepseek-v3"), context=1, mla_cache="decompressed")
    assert cache.values_per_token_per_layer == 128 * (128 + 64) + 128 * 128
    assert cache.bytes_per_token == 61 * 40_960 * 2


def vllm_peak_blocks(context: int, window: int | None, block: int, chunk: int | None = None) -> int:
    """Replay vLLM v1's block manager for one sequence, one token a step, and return the most
    blocks it held: before each step remove_skipped_blocks frees get_num_skipped_tokens(computed)
    // block blocks from the front (computed - window + 1 for a sliding window, computed // chunk x
    chunk for chunked local attention, 0 for full attention), then allocate_new_blocks tops the
    sequence up to cdiv(computed + 1, block)."""
    live: list[bool] = []
    peak = 0
    for computed in range(context):
        skipped = max(0, computed - window + 1) if window else 0
        if chunk:
            skipped = computed // chunk * chunk
        for i in range(min(skipped // block, len(live))):
            live[i] = False
        live.extend([True] * (-(-(computed + 1) // block) - len(live)))
        peak = max(peak, sum(live))
    return peak


@pytest.mark.parametrize("block", [1, 4, 16])
def test_blocks_follow_vllms_manager_step_by_step(block):
    cfg = preset("mistral-7b")  # every layer windowed, 4096 tokens
    for context in (1, 15, 16, 17, 4095, 4096, 4097, 4111, 4112, 4113, 9000):
        cache = kv_cache(cfg, context=context, block_size=block)
        assert cache.blocks_windowed == vllm_peak_blocks(context, 4096, block), context
        assert cache.full_layers == 0 and cache.windowed_layers == 32
        assert cache.bytes_per_sequence == 32 * cache.blocks_windowed * block * 2 * 8 * 128 * 2
    cache = kv_cache(preset("llama3-8b"), context=1000, block_size=block)
    assert cache.blocks_full == vllm_peak_blocks(1000, None, block)


@pytest.mark.parametrize(("window", "block"), [(7, 4), (8, 4), (9, 4), (5, 16), (33, 16), (2, 3), (1, 2)])
def test_windowed_blocks_for_windows_off_block_boundaries(window, block):
    from dataclasses import replace
    cfg = replace(preset("mistral-7b"), sliding_window=window)
    for context in range(1, 60):
        assert kv_cache(cfg, context=context, block_size=block).blocks_windowed == \
            vllm_peak_blocks(context, window, block), context


@pytest.mark.parametrize(("chunk", "block"), [(8, 4), (9, 4), (7, 4), (5, 16), (33, 16), (2, 3), (16, 16)])
def test_chunked_blocks_follow_vllms_chunked_local_manager(chunk, block):
    from dataclasses import replace
    cfg = replace(preset("llama4-scout"), attention_chunk_size=chunk)
    for context in range(1, 80):
        cache = kv_cache(cfg, context=context, block_size=block)
        assert cache.blocks_chunked == vllm_peak_blocks(context, None, block, chunk), context
        assert (cache.full_layers, cache.chunked_layers) == (12, 36)


def test_llama4_scout_keeps_one_chunk_on_its_local_layers():
    # 36 chunked layers keep at most 8,192 tokens, 12 global ones the context: at 128K tokens in bf16
    # with 8 K/V heads of 128, (12 x 131072 + 36 x 8192) x 4096 bytes. vLLM's groups: 12 and 36 layers,
    # 36 >= 1.5 x 12, so groups of 12: no padding.
    cache = kv_cache(preset("llama4-scout"), context=131_072)
    assert (cache.blocks_full, cache.blocks_chunked) == (8192, 512)
    assert (cache.padded_full_layers, cache.padded_chunked_layers) == (12, 36)
    assert cache.bytes_per_sequence == (12 * 131_072 + 36 * 8192) * 2 * 8 * 128 * 2


def test_unpaged_windowed_layers_keep_the_window():
    cache = kv_cache(preset("mistral-7b"), context=10_000, block_size=None)
    assert (cache.tokens_windowed, cache.blocks_windowed, cache.block_size) == (4096, 4096, None)
    assert cache.bytes_per_sequence == 4096 * cache.bytes_per_token
    short = kv_cache(preset("mistral-7b"), context=100, block_size=None)
    assert short.bytes_per_sequence == 100 * short.bytes_per_token


def test_hybrid_models_pad_layer_groups_as_vllm_does():
    # Gemma 3 27B: 62 layers, every 6th global -> 10 full, 52 windowed. vLLM's group size is the
    # smaller count (52 >= 1.5 x 10), so the windowed layers fill ceil(52 / 10) = 6 groups of 10.
    cfg = preset("gemma-3-27b")
    paged = kv_cache(cfg, context=4096, block_size=16)
    assert (paged.full_layers, paged.windowed_layers) == (10, 52)
    assert (paged.padded_full_layers, paged.padded_windowed_layers) == (10, 60)
    assert paged.blocks_per_sequence == 10 * 256 + 60 * paged.blocks_windowed
    exact = kv_cache(cfg, context=4096, block_size=None)
    assert (exact.padded_full_layers, exact.padded_windowed_layers) == (10, 52)
    # Gemma 2: 21 and 21, one group each, no padding. Past its 4096-token window a windowed layer
    # has held 4096 / 16 + 1 blocks (the window straddles a block boundary).
    gemma2 = kv_cache(preset("gemma-2-9b"), context=8192)
    assert (gemma2.padded_full_layers, gemma2.padded_windowed_layers) == (21, 21)
    assert gemma2.bytes_per_sequence == (21 * 8192 + 21 * (4096 + 16)) * 2 * 8 * 256 * 2


def test_tensor_parallel_splits_heads_and_replicates_past_them():
    cfg = preset("llama2-70b")  # 8 KV heads
    one = kv_cache(cfg, context=4096, batch=4)
    for tp, heads in ((2, 4), (8, 1), (16, 1), (64, 1)):
        cache = kv_cache(cfg, context=4096, batch=4, tensor_parallel=tp)
        assert cache.heads_per_gpu == heads
        assert cache.bytes_per_gpu == one.total_bytes * heads // 8
        assert cache.total_bytes == one.total_bytes
    assert any("replicated 8 times" in n for n in kv_cache(cfg, context=1, tensor_parallel=64).convention)
    ds = preset("deepseek-v3")
    latent = kv_cache(ds, context=1000, tensor_parallel=8)
    assert latent.bytes_per_gpu == latent.total_bytes  # the latent is whole on every rank
    wide = kv_cache(ds, context=1000, tensor_parallel=8, mla_cache="decompressed")
    assert wide.bytes_per_gpu * 8 == wide.total_bytes and wide.heads_per_gpu == 16
    assert bytes_per_token(cfg, tensor_parallel=8) == 327_680 // 8


def test_cache_dtypes():
    cfg = preset("llama2-70b")
    assert kv_cache(cfg, context=1, cache_dtype="float32").bytes_per_token == 2 * 327_680
    assert kv_cache(cfg, context=1, model_dtype="float16").cache_dtype == "float16"
    for name in ("fp8", "fp8_e4m3", "e5m2"):
        fp8 = kv_cache(cfg, context=1000, batch=2, cache_dtype=name, block_size=None)
        assert fp8.bytes_per_token == 327_680 // 2
        assert fp8.scale_bytes == 80 * 2 * 4  # a float32 k_scale and v_scale per layer
        assert fp8.total_bytes == 2 * 1000 * 327_680 // 2 + 640
    int8 = kv_cache(cfg, context=1, cache_dtype="int8")
    # 1 byte per value plus a float32 K and V scale per token per KV head (int8_per_token_head).
    assert int8.scale_bytes_per_token_per_layer == 2 * 8 * 4
    assert int8.bytes_per_token == 80 * (2 * 8 * 128 + 2 * 8 * 4)
    assert int8.scale_bytes == 0


def test_mla_cache_on_a_model_without_latent_attention_is_ignored():
    cfg = preset("llama3-8b")
    plain, asked = kv_cache(cfg, context=100), kv_cache(cfg, context=100, mla_cache="decompressed")
    assert plain.total_bytes == asked.total_bytes and asked.layout == "kv"
    assert any("mla_cache is ignored" in note for note in asked.convention)


def test_bytes_grow_with_context_and_linearly_with_batch():
    # What a capacity search relies on: non-decreasing in context, linear in batch.
    for name in ("gemma-2-9b", "mistral-7b", "deepseek-v3"):
        cfg = preset(name)
        sizes = [kv_cache(cfg, context=c, cache_dtype="fp8").bytes_per_gpu for c in range(1, 8192, 37)]
        assert sizes == sorted(sizes)
        one, many = kv_cache(cfg, context=3000), kv_cache(cfg, context=3000, batch=7)
        assert many.total_bytes == 7 * one.bytes_per_sequence + one.scale_bytes


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(context=4097), "context"),
    (dict(context=0), "context"),
    (dict(context=10, cache_dtype="fp7"), "cache_dtype"),
    (dict(context=10, cache_dtype="float64"), "cache_dtype"),
    (dict(context=10, cache_dtype=["fp8"]), "cache_dtype"),
    (dict(context=10, model_dtype="int8"), "model_dtype"),
    (dict(context=10, mla_cache="compressed"), "mla_cache"),
    (dict(context=10, tensor_parallel=3), "tensor_parallel"),
    (dict(context=10, tensor_parallel=0), "tensor_parallel"),
    (dict(context=10, block_size=0), "block_size"),
    (dict(context=10, batch=0), "batch"),
    (dict(context=True), "context"),
])
def test_refusals_name_the_field(kwargs, field):
    with pytest.raises(InvalidInput) as caught:
        kv_cache(preset("llama2-7b"), **kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("name", ["llama2-7b", "gemma-2-9b", "gemma-3-27b", "deepseek-v3", "mistral-7b"])
@pytest.mark.parametrize("block", [None, 16, 7])
@pytest.mark.parametrize("cache_dtype", ["auto", "float8_e4m3fn", "int8"])
def test_sequence_bytes_per_gpu_is_the_records_bytes(name, block, cache_dtype):
    """The solvers' shortcut gives the record's bytes_per_gpu for any batch and context."""
    cfg = preset(name)
    for context in (1, 100, 4095, 4096, 4097, 20000):
        context = min(context, cfg.max_seq_len)
        for tp in (1, 2, 8):
            if cfg.n_heads % tp:
                continue
            one, scales = kv_cache_module.sequence_bytes_per_gpu(
                cfg, context=context, cache_dtype=cache_dtype, block_size=block, tensor_parallel=tp)
            for batch in (1, 3):
                record = kv_cache(cfg, context=context, batch=batch, cache_dtype=cache_dtype,
                                  block_size=block, tensor_parallel=tp)
                assert batch * one + scales == record.bytes_per_gpu
