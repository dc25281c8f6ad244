"""The key/value cache a decoder keeps while it generates: bytes per token, per sequence, per
batch and per GPU.

Values one token adds to one layer's cache (then times the cache dtype's bytes), as each attention
block answers them (app/accounting/blocks/grouped.py, latent.py):
  multi-head, grouped- and multi-query   2 x n_kv_heads x head_dim (K and V)
  latent attention, "latent"             kv_lora_rank + qk_rope_head_dim: the normed latent and
                                         the shared rotary key (vLLM's MLAAttentionSpec, FlashMLA;
                                         transformers 5.23's DynamicCache holds the same two, as
                                         keys [b, 1, s, kv_lora_rank] and values [b, 1, s, rope])
  latent attention, "decompressed"       n_heads x (qk_nope + qk_rope + v_head_dim): keys of
                                         n_heads x (nope + rope), values of n_heads x v_head_dim,
                                         unpadded (transformers 4.x's eager cache, which padded V
                                         for flash-attention only after the cache update)

Tokens each layer keeps (full, windowed, chunked) and vLLM's paging of them in blocks and KV
cache groups: inference/paging.py.

Whose cache (`engine`): "vllm", the serving engine the calculators follow, as above; or
"transformers", the DynamicCache transformers 5.23 holds: unpaged, in the model's dtype, and what
each attention passes to cache.update. The two differ per token only where transformers caches
keys and values expanded (cfg.transformers_caches_all_heads: Falcon's new_decoder_architecture,
whose _split_heads broadcasts each key/value head to [b, n_heads, s, head_dim] before the update,
while vLLM's FalconAttention keeps total_num_kv_heads = num_kv_heads): n_heads / n_kv_heads times
the bytes. Every other supported family caches the same heads in both (latent attention: the
latent, as above).
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.accounting import blocks, dtypes
from app.accounting.blocks.base import CacheShape
from app.accounting.errors import InvalidInput
from app.accounting.inference import paging, state
from app.accounting.records import RECORD
from app.accounting.training.sharding import check_parallel
from app.accounting.transformer import TransformerConfig

MlaCache = Literal["latent", "decompressed"]
Layout = Literal["kv", "latent", "decompressed"]
Engine = Literal["vllm", "transformers"]
ENGINES = ("vllm", "transformers")

VLLM_DEFAULT_BLOCK_SIZE_TOKENS = 16
"""vLLM's default block_size on CUDA (vllm/config/cache.py, CacheConfig.block_size)."""
SCALE_BYTES = 4
"""vLLM keeps KV quantization scales in float32 (vllm/v1/kv_cache_interface.py:
get_dtype_size(torch.float32))."""
PER_TENSOR_SCALES_PER_LAYER = 2
"""fp8 caches: one k_scale and one v_scale per attention layer (vLLM's Attention._k_scale,
_v_scale, float32 scalars), held in the layer, outside the cache blocks."""
PER_TOKEN_HEAD_SCALES = 2
"""int8 caches (vLLM's int8_per_token_head): a K and a V scale per token per KV head, carved from
the cache blocks (AttentionSpec.page_size_bytes adds 2 x block_size x num_kv_heads x 4 bytes)."""
# Cache formats: the model's float formats, fp8 (1 byte) and int8 (1 byte plus scales).
CACHE_FORMATS = ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int8")
_MODEL_FORMATS = ("float32", "bfloat16", "float16")


@dataclass(slots=True)
class KvCache:
    """The key/value cache of `batch` sequences of `context` tokens each."""

    engine: Engine
    """Whose cache: vLLM's (paged, n_kv_heads) or transformers' DynamicCache (unpaged, the heads
    its attention caches)."""
    cache_dtype: str
    """The cache's number format ("auto" resolved to the model's dtype)."""
    bytes_per_element: int
    layout: Layout
    """kv: K and V per key/value head; latent / decompressed: latent attention's two conventions."""
    heads: int
    """Heads one layer's cache keeps (n_kv_heads; 1 for the latent; n_heads decompressed)."""
    heads_per_gpu: int
    """Heads each tensor-parallel rank keeps: max(1, heads // tensor_parallel); the latent whole."""
    values_per_token_per_layer: int
    """Values one token adds to one layer, full or windowed alike (all heads)."""
    values_per_token_per_layer_per_gpu: int
    """The same on one tensor-parallel rank (its heads)."""
    scale_bytes_per_token_per_layer: int
    """int8's per-token, per-head float32 scales (all heads); 0 for other formats."""
    bytes_per_token: int
    """One token in every layer, no window cap and no paging (all heads, one copy)."""
    bytes_per_token_per_gpu: int
    """The same on one tensor-parallel rank."""
    full_layers: int
    """Layers attending to the whole sequence."""
    windowed_layers: int
    """Layers attending within sliding_window."""
    window: int | None
    """The window of the windowed layers, in tokens; null without any."""
    chunked_layers: int
    """Layers attending within aligned attention_chunk_size chunks (Llama 4's local layers)."""
    chunk: int | None
    """The chunk of the chunked layers, in tokens; null without any."""
    tokens_full: int
    """Tokens a full-attention layer keeps per sequence: the context."""
    tokens_windowed: int
    """Tokens a windowed layer keeps per sequence: min(context, window); 0 without such layers."""
    tokens_chunked: int
    """The most tokens a chunked layer keeps per sequence on the way to context: min(context, chunk);
    0 without such layers."""
    block_size: int | None
    """Tokens per block; null when unpaged (exact, as a block of 1)."""
    blocks_full: int
    """Blocks one full-attention layer holds per sequence (tokens, when unpaged)."""
    blocks_windowed: int
    """The most blocks one windowed layer held on the way to `context` (past the window vLLM holds
    this or one block fewer, as the window's start crosses block boundaries)."""
    blocks_chunked: int
    """The most blocks one chunked layer held on the way to `context` (the current chunk's)."""
    padded_full_layers: int
    """Full-attention layers vLLM allocates blocks for: full_layers plus group padding."""
    padded_windowed_layers: int
    """Windowed layers vLLM allocates blocks for: windowed_layers plus group padding."""
    padded_chunked_layers: int
    """Chunked layers vLLM allocates blocks for: chunked_layers plus group padding."""
    blocks_per_sequence: int
    """Layer-blocks per sequence: blocks times layers of each kind, padding included."""
    state_layers: int
    """State-space and linear-attention layers (Mamba-2, gated DeltaNet): no per-token cache, a state."""
    state_bytes_per_sequence: int
    """Their state for one sequence, constant in context (inference/state.py)."""
    bytes_per_sequence: int
    """One sequence's cache, all layers and heads, one copy: the attention layers' blocks and the
    state layers' state."""
    scale_bytes: int
    """fp8's per-tensor scales, per copy of the model: fixed, not per token."""
    total_bytes: int
    """batch x bytes_per_sequence + scale_bytes."""
    bytes_per_gpu: int
    """What one tensor-parallel rank holds for the batch (its heads; replicas on every rank)."""
    convention: list[str]
    """The conventions these bytes rest on, with their sources, in words."""

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class _PerToken:
    """One token in one layer: what the whole model and one rank keep, in bytes."""

    cache_dtype: str
    element_bytes: int
    layout: Layout
    heads: int
    heads_per_gpu: int
    values: int
    values_per_gpu: int
    scale_bytes: int
    scale_bytes_per_gpu: int
    tensor_scale_bytes: int
    notes: tuple[str, ...]

    @property
    def layer_bytes(self) -> int:
        return self.values * self.element_bytes + self.scale_bytes

    @property
    def layer_bytes_per_gpu(self) -> int:
        return self.values_per_gpu * self.element_bytes + self.scale_bytes_per_gpu


def _format(name: str, field: str, allowed: tuple[str, ...]) -> dtypes.Format:
    fmt = dtypes.lookup(name, field=field)
    if fmt.name not in allowed:
        raise InvalidInput(field, f"{name!r} cannot be a {field}; use one of {', '.join(allowed)}")
    return fmt


def _names(cache_dtype: object, model_dtype: object, mla_cache: object, engine: object) -> None:
    """Refuse non-strings before the cached lookup (which needs hashable arguments)."""
    named = {"cache_dtype": cache_dtype, "model_dtype": model_dtype, "mla_cache": mla_cache, "engine": engine}
    for field, value in named.items():
        if not isinstance(value, str):
            raise InvalidInput(field, f"must be a name, got {value!r}"[:120])


def _all_heads(cfg: TransformerConfig, tp: int, mla_cache: str) -> CacheShape:
    """What transformers caches when its attention broadcasts K and V to every query head before
    the update (Falcon's new_decoder_architecture): 2 x n_heads x head_dim values per token per
    layer, n_heads / n_kv_heads times the key/value heads vLLM keeps."""
    heads, heads_gpu, kv = cfg.n_heads, max(1, cfg.n_heads // tp), cfg.kv_heads
    values = 2 * heads * cfg.hd
    notes = [f"transformers caches K and V broadcast to all {heads} query heads (each of the {kv} key/value "
             f"heads repeated {heads // kv}x before the cache update): 2 x {heads} x {cfg.hd} = {values} "
             f"values per token per layer, {heads // kv}x the 2 x {kv} x {cfg.hd} vLLM caches"]
    if mla_cache == "decompressed":
        notes.append("mla_cache is ignored: this model has no latent attention")
    return CacheShape("kv", heads, heads_gpu, values, 2 * heads_gpu * cfg.hd, tuple(notes))


def _positive(value: object, field: str) -> int:
    if type(value) is not int or value < 1:
        raise InvalidInput(field, f"must be a positive integer, got {value!r}"[:120])
    return value


@lru_cache(maxsize=2048)
def _per_token(cfg: TransformerConfig, cache_dtype: str, model_dtype: str, mla_cache: str,
               tp: int, engine: Engine = "vllm") -> _PerToken:
    if mla_cache not in ("latent", "decompressed"):
        raise InvalidInput("mla_cache", f"must be 'latent' or 'decompressed', got {mla_cache!r}"[:120])
    if engine not in ENGINES:
        raise InvalidInput("engine", f"must be 'vllm' or 'transformers', got {engine!r}"[:120])
    model = _format(model_dtype, "model_dtype", _MODEL_FORMATS)
    fmt = model if cache_dtype == "auto" else _format(cache_dtype, "cache_dtype", CACHE_FORMATS)
    check_parallel(cfg, tp=tp, pp=1, dp=1, ep=1)
    shape = blocks.model_attention(cfg).cache(mla_cache=mla_cache, tp=tp)  # every layer's, window aside
    if engine == "transformers":
        # DynamicCache stores the K and V tensors attention computes, in the model's dtype.
        if fmt.name != model.name:
            raise InvalidInput("cache_dtype", f"transformers' DynamicCache keeps keys and values in the "
                                              f"model's dtype ({model.name}), not {fmt.name}; use 'auto' (or "
                                              "engine 'vllm')")
        if cfg.transformers_caches_all_heads and shape.layout == "kv":
            shape = _all_heads(cfg, tp, mla_cache)
    notes = list(shape.notes)
    if engine == "vllm" and cfg.transformers_caches_all_heads and cfg.kv_heads < cfg.n_heads:
        notes.append(f"vLLM caches the {cfg.kv_heads} key/value heads; transformers caches them broadcast to "
                     f"all {cfg.n_heads} query heads, {cfg.n_heads // cfg.kv_heads}x these bytes "
                     "(engine 'transformers')")
    elem = int(fmt.storage_bytes)
    scales = scales_gpu = tensor_scales = 0
    if fmt.name == "int8":
        scales = PER_TOKEN_HEAD_SCALES * shape.heads * SCALE_BYTES
        scales_gpu = PER_TOKEN_HEAD_SCALES * shape.heads_per_gpu * SCALE_BYTES
        notes.append(f"int8 cache as vLLM's int8_per_token_head: 1 byte per value plus a float32 K and V "
                     f"scale per token per head ({scales} bytes per token per layer)")
    elif fmt.name.startswith("float8"):
        tensor_scales = attending(cfg) * PER_TENSOR_SCALES_PER_LAYER * SCALE_BYTES
        notes.append(f"{fmt.name} cache: 1 byte per value; vLLM scales per tensor (a float32 k_scale and "
                     f"v_scale per layer, {tensor_scales} bytes per copy, outside the blocks). vLLM's "
                     "fp8_ds_mla layout (656 bytes per token per layer, DeepSeek sparse) is not modelled")
    if cache_dtype == "auto":
        notes.append(f"cache dtype 'auto': the model's {fmt.name}")
    return _PerToken(fmt.name, elem, shape.layout, shape.heads, shape.heads_per_gpu, shape.values,
                     shape.values_per_gpu, scales, scales_gpu, tensor_scales, tuple(notes))


def kv_cache(cfg: TransformerConfig, *, context: int, batch: int = 1, cache_dtype: str = "auto",
             model_dtype: str = "bfloat16", block_size: int | None = VLLM_DEFAULT_BLOCK_SIZE_TOKENS,
             mla_cache: MlaCache = "latent", tensor_parallel: int = 1, engine: Engine = "vllm") -> KvCache:
    """The cache of `batch` sequences holding `context` tokens each (prompt plus generated),
    while the step that writes the last token runs, as `engine` holds it (transformers: unpaged,
    block_size not read)."""
    _positive(context, "context")
    if context > cfg.max_seq_len:
        raise InvalidInput("context", f"{context} exceeds the model's max_seq_len ({cfg.max_seq_len})")
    _positive(batch, "batch")
    tp = _positive(tensor_parallel, "tensor_parallel")
    if block_size is not None:
        _positive(block_size, "block_size")
    _names(cache_dtype, model_dtype, mla_cache, engine)
    per = _per_token(cfg, cache_dtype, model_dtype, mla_cache, tp, engine)
    k = paging.kinds(cfg)
    kept = state.state_bytes(cfg, model_bytes=_model_bytes(model_dtype), engine=engine, tp=tp)
    paged, block, held = _held(cfg, per, kept, context, block_size, engine)
    layer_blocks = held.total
    # A page is one layer's block: block tokens x bytes per token per layer (vLLM's page_size_bytes).
    page = block * per.layer_bytes  # all heads
    page_gpu = block * per.layer_bytes_per_gpu  # one rank's heads
    # Paged with the attention pages (vLLM's hybrids: held.padded[3] pages), or kept beside them.
    state_sequence = 0 if held.padded[3] else kept.bytes_per_sequence
    state_sequence_gpu = 0 if held.padded[3] else kept.bytes_per_sequence_per_gpu
    per_sequence = layer_blocks * page + state_sequence
    notes = list(per.notes) + list(kept.notes)
    notes.append(_paging_note(block_size, paged, k, held.padded, engine))
    if held.padded[3]:
        notes.append(f"a hybrid as vLLM pages it: attention blocks of {block} tokens, the least multiple "
                     f"of 16 whose page holds one layer's state ({kept.layer_bytes_per_gpu} bytes a rank), "
                     f"and each state padded to that page, one a sequence for each of the {held.padded[3]} "
                     "state layers (HybridAttentionMambaModelConfig, without prefix caching)")
    if k.windowed:
        notes.append(f"{k.windowed} of {cfg.n_layers} layers attend in a {k.window}-token window and keep "
                     f"min(context, {k.window}) tokens: the {k.window - 1} the next query reads and the one "
                     f"being written (transformers keeps {k.window - 1} between forwards, over a "
                     f"{k.window}-token storage)")
    if k.chunked:
        notes.append(f"{k.chunked} of {cfg.n_layers} layers attend within aligned {k.chunk}-token chunks and "
                     f"keep the current chunk's tokens, at most min(context, {k.chunk}) (vLLM's "
                     "ChunkedLocalAttentionManager frees the blocks before the chunk; transformers keeps a "
                     f"{k.chunk}-token sliding window, the same during the step)")
    return KvCache(
        engine=engine, cache_dtype=per.cache_dtype, bytes_per_element=per.element_bytes, layout=per.layout,
        heads=per.heads, heads_per_gpu=per.heads_per_gpu, values_per_token_per_layer=per.values,
        values_per_token_per_layer_per_gpu=per.values_per_gpu,
        scale_bytes_per_token_per_layer=per.scale_bytes, bytes_per_token=attending(cfg) * per.layer_bytes,
        bytes_per_token_per_gpu=attending(cfg) * per.layer_bytes_per_gpu, full_layers=k.full,
        windowed_layers=k.windowed, window=k.window, chunked_layers=k.chunked, chunk=k.chunk,
        tokens_full=context, tokens_windowed=min(context, k.window) if k.windowed else 0,
        tokens_chunked=min(context, k.chunk) if k.chunked else 0, block_size=block if paged else None,
        blocks_full=held.full, blocks_windowed=held.windowed, blocks_chunked=held.chunked,
        padded_full_layers=held.padded[0], padded_windowed_layers=held.padded[1],
        padded_chunked_layers=held.padded[2], blocks_per_sequence=layer_blocks,
        state_layers=kept.layers,
        state_bytes_per_sequence=held.padded[3] * page if held.padded[3] else kept.bytes_per_sequence,
        bytes_per_sequence=per_sequence, scale_bytes=per.tensor_scale_bytes,
        total_bytes=batch * per_sequence + per.tensor_scale_bytes,
        bytes_per_gpu=batch * (layer_blocks * page_gpu + state_sequence_gpu) + per.tensor_scale_bytes,
        convention=notes)


@lru_cache(maxsize=8192)
def sequence_bytes_per_gpu(cfg: TransformerConfig, *, context: int, cache_dtype: str = "auto",
                           model_dtype: str = "bfloat16",
                           block_size: int | None = VLLM_DEFAULT_BLOCK_SIZE_TOKENS,
                           mla_cache: MlaCache = "latent", tensor_parallel: int = 1,
                           engine: Engine = "vllm", state_included: bool = True) -> tuple[int, int]:
    """(one sequence's bytes on one tensor rank, the per-tensor scale bytes each rank keeps once):
    kv_cache's bytes_per_gpu is batch x the first + the second. state_included False leaves out the
    state-space layers' constant state (what the attention layers alone hold). The same arithmetic without the
    record, for the capacity and time solvers that ask it for many contexts and batches."""
    if context > cfg.max_seq_len:
        raise InvalidInput("context", f"{context} exceeds the model's max_seq_len ({cfg.max_seq_len})")
    per = _per_token(cfg, cache_dtype, model_dtype, mla_cache, tensor_parallel, engine)
    kept = state.state_bytes(cfg, model_bytes=_model_bytes(model_dtype), engine=engine, tp=tensor_parallel)
    _, block, held = _held(cfg, per, kept, context, block_size, engine)
    pages = held.total - (0 if state_included else held.padded[3])
    beside = 0 if held.padded[3] or not state_included else kept.bytes_per_sequence_per_gpu
    return pages * block * per.layer_bytes_per_gpu + beside, per.tensor_scale_bytes


def _held(cfg: TransformerConfig, per: _PerToken, kept: state.StateBytes, context: int,
          block_size: int | None, engine: Engine) -> tuple[bool, int, paging.Blocks]:
    """(paged, the block in tokens, what one sequence holds): vLLM pages a hybrid's state with its
    attention blocks, which it first enlarges to hold one state (state.vllm_hybrid_block)."""
    paged = engine == "vllm" and block_size is not None and block_size > 1
    block = block_size if paged else 1
    hybrid = paged and kept.layers and attending(cfg)
    if hybrid:
        block = state.vllm_hybrid_block(per.layer_bytes_per_gpu, kept.layer_bytes_per_gpu, block)
    return paged, block, paging.layer_blocks(cfg, context, block, paged, kept.layers if hybrid else 0)


def _model_bytes(model_dtype: str) -> int:
    return int(_format(model_dtype, "model_dtype", _MODEL_FORMATS).storage_bytes)


def _paging_note(block_size: int | None, paged: bool, k: paging.Kinds, padded: tuple[int, int, int, int],
                 engine: Engine) -> str:
    if engine == "transformers":
        return ("engine transformers: the DynamicCache transformers holds, unpaged, exactly the tokens kept"
                + (f" (block_size {block_size} is vLLM's paging, not read)" if (block_size or 1) > 1 else ""))
    if not paged:
        return "unpaged: exactly the tokens kept (block_size null or 1)"
    note = (f"paged as vLLM v1 pages: whole blocks of {block_size} tokens per layer, the last one rounded "
            "up per sequence")
    counts = (k.full, k.windowed, k.chunked)
    if padded[:3] != counts:
        kinds = ("full", "windowed", "chunked")
        named = [(n, p, kind) for n, p, kind in zip(counts, padded[:3], kinds, strict=True) if n]
        note += ("; vLLM's equal-size KV cache groups pad "
                 + " and ".join(f"{n} {kind}" for n, _, kind in named)
                 + " layers to " + " and ".join(str(p) for _, p, _ in named))
    return note


def bytes_per_token(cfg: TransformerConfig, *, cache_dtype: str = "auto", model_dtype: str = "bfloat16",
                    mla_cache: MlaCache = "latent", tensor_parallel: int = 1, engine: Engine = "vllm") -> int:
    """Bytes one token adds to one tensor-parallel rank's cache across all layers, with no window
    cap and no paging (tensor_parallel 1: the whole model). Linear in tokens, so a byte budget
    holds budget // this tokens of full attention; fp8's fixed per-tensor scales are left out."""
    tp = _positive(tensor_parallel, "tensor_parallel")
    _names(cache_dtype, model_dtype, mla_cache, engine)
    per = _per_token(cfg, cache_dtype, model_dtype, mla_cache, tp, engine)
    return attending(cfg) * per.layer_bytes_per_gpu


def attending(cfg: TransformerConfig) -> int:
    """Layers that cache keys and values (state-space and linear-attention layers keep a state)."""
    k = paging.kinds(cfg)
    return k.full + k.windowed + k.chunked
