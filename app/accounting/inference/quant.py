"""A model's weight bytes in a storage format: one copy, and one GPU's share under tensor
parallelism.

Which tensors a format stores (formats.py has each layout and its source):
- float32 / bfloat16 / float16: every tensor, except components named in `keep`, which stay in
  `base_dtype`.
- the quantized formats (FP8, INT8, GPTQ, AWQ, NF4): every weight matrix outside `keep`; 1-D
  tensors (norms, biases) stay in `base_dtype`, as GPTQ/AWQ keep fp16 biases and bitsandbytes
  and vLLM keep norms and biases in the model dtype. `keep` defaults to embeddings, lm_head,
  norms and router, what their quantizers leave alone (formats.py cites each).
- GGUF: llama.cpp's own choice per tensor (ggml.py): F32 for 1-D tensors, norms, routers and
  position embeddings, the ftype's types elsewhere. Components in `keep` stay in `base_dtype`.

Per GPU (tensor_parallel ranks): each tensor is cut as weights.py's tp_split says, and the
shard's bytes counted in the same storage (its own blocks, groups and scales). A split dimension
is divided with ceiling, so per_gpu_bytes is the largest rank's share; key/value heads past
n_kv_heads ranks are replicated (one head per rank). A shard that no longer divides the format's
blocks or groups is refused naming tensor_parallel, as vLLM refuses it.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from app.accounting import blocks, dtypes
from app.accounting.errors import InvalidInput
from app.accounting.inference import ggml
from app.accounting.inference.formats import (
    FORMATS,
    QUANTIZATION_LISTING,
    WeightFormat,
    check_group_size,
    lookup_format,
    matrix_bytes,
    tensor_bytes,
)
from app.accounting.inference.weights import COMPONENTS, WeightTensor, model_tensors
from app.accounting.records import RECORD
from app.accounting.training.sharding import check_parallel
from app.accounting.transformer import TransformerConfig

__all__ = ["FORMATS", "QUANTIZATION_LISTING", "WeightBytes", "WeightFormat", "list_formats",
           "lookup_format", "tensor_bytes", "tensor_storage", "weight_bytes"]

BASE_DTYPES = ("float32", "bfloat16", "float16")
_GGUF_FLOAT = ("F32", "F16", "BF16")
_SHARED_GATE = "ffn_gate_inp_shexp.weight"  # Qwen2-MoE's d_model -> 1 gate: kept with the router


@dataclass(slots=True)
class WeightBytes:
    """A model's weights stored in one format. Bytes unless named otherwise."""

    format: str
    format_name: str
    total_bytes: int
    """One copy of every weight tensor."""
    per_gpu_bytes: int
    """The largest tensor-parallel rank's share (equal to total_bytes at tensor_parallel 1)."""
    tensor_parallel: int
    params: int
    quantized_params: int
    """Parameters stored in the format (for a float format, those outside `keep`)."""
    unquantized_params: int
    """Parameters left in base_dtype (GGUF: in F32, F16 or base_dtype)."""
    bits_per_weight: float
    """8 x total_bytes / params: effective over every weight, kept ones included."""
    by_component: dict[str, int]
    """Bytes of one copy by component, in weights.COMPONENTS order."""
    by_storage: dict[str, int]
    """Bytes of one copy by how they are stored: the format id, base_dtype, or ggml types."""
    kept: list[str]
    """Components no tensor of which is stored in the format."""
    base_dtype: str
    group_size: int | None
    """GPTQ/AWQ's group (-1: one per input column); null for the other formats."""
    warnings: list[str]
    notes: list[str]

    __pydantic_config__ = RECORD


def list_formats() -> list[WeightFormat]:
    """The formats, as GET /api/v1/quantization lists them."""
    return list(FORMATS.values())


def _keep(fmt: WeightFormat, keep: Iterable[str] | None) -> tuple[str, ...]:
    if keep is None:
        return fmt.default_keep
    if isinstance(keep, str) or not isinstance(keep, Iterable):
        raise InvalidInput("keep", f"must list components, got {keep!r}"[:160])
    chosen = set()
    for c in keep:
        if c not in COMPONENTS:
            raise InvalidInput("keep", f"unknown component {c!r}"[:80]
                               + f": choose from {', '.join(COMPONENTS)}")
        chosen.add(c)
    return tuple(c for c in COMPONENTS if c in chosen)


def _base(base_dtype: str) -> str:
    name = dtypes.lookup(base_dtype, field="base_dtype").name
    if name not in BASE_DTYPES:
        raise InvalidInput("base_dtype", f"{name} cannot hold unquantized weights here; choose "
                           f"{', '.join(BASE_DTYPES)}")
    return name


def weight_bytes(cfg: TransformerConfig, fmt_id: str, *, group_size: int = 128,
                 keep: Iterable[str] | None = None, base_dtype: str = "bfloat16",
                 tensor_parallel: int = 1) -> WeightBytes:
    """Bytes of the model's weights in format `fmt_id` (formats.FORMATS; aliases such as
    "Q4_K_M" or "bf16" are taken), components in `keep` left in `base_dtype`."""
    fmt = lookup_format(fmt_id)
    check_group_size(group_size)
    if type(tensor_parallel) is not int or not 1 <= tensor_parallel <= 65_536:
        raise InvalidInput("tensor_parallel",
                           f"must be an integer in [1, 65536], got {tensor_parallel!r}"[:120])
    check_parallel(cfg, tp=tensor_parallel, pp=1, dp=1, ep=1)
    grouped = fmt.kind in ("gptq", "awq")
    done = _weight_bytes(cfg, fmt.id, group_size if grouped else 128, _keep(fmt, keep), _base(base_dtype),
                         tensor_parallel)
    return WeightBytes(**{**done, "by_component": dict(done["by_component"]),
                          "by_storage": dict(done["by_storage"]), "kept": list(done["kept"]),
                          "warnings": list(done["warnings"]), "notes": list(done["notes"]),
                          "group_size": group_size if grouped else None})


def tensor_storage(cfg: TransformerConfig, fmt_id: str, *, keep: Iterable[str] | None = None,
                   base_dtype: str = "bfloat16") -> dict[str, str]:
    """How each tensor (by GGUF name) is stored: the format's id, base_dtype, or for GGUF its
    ggml type (Q4_K, Q6_K, F32...)."""
    fmt = lookup_format(fmt_id)
    keep_t, base = _keep(fmt, keep), _base(base_dtype)
    return {t.gguf_name: _storage(fmt, t, keep_t, base, cfg, {})[0] for t in model_tensors(cfg)}


def _storage(fmt: WeightFormat, t: WeightTensor, keep: tuple[str, ...], base: str, cfg: TransformerConfig,
             fallbacks: dict[tuple[str, str], int]) -> tuple[str, bool]:
    """How one tensor is stored (the format's id, base_dtype, or for GGUF a ggml type), and
    whether that is the format's own storage rather than a float left aside."""
    kept = t.component in keep or (t.name == _SHARED_GATE and "router" in keep)
    if fmt.kind == "gguf":
        gtype, warning = ggml.gguf_type(fmt.id, t.name, t.layer, t.shape, n_layers=cfg.n_layers,
                                        n_experts=cfg.n_experts or 0, tied=cfg.tied_embeddings)
        if kept and gtype not in _GGUF_FLOAT:
            return base, False
        if warning:
            fallbacks[(t.name, warning)] = fallbacks.get((t.name, warning), 0) + 1
        return gtype, gtype not in _GGUF_FLOAT
    if kept or (fmt.kind != "float" and not t.matrix):
        return base, False
    return fmt.id, True


def _shard(t: WeightTensor, tp: int, kv_heads: int) -> tuple[int, ...]:
    """The largest rank's piece of a tensor under tp-way tensor parallelism."""
    split, shape = t.tp_split, list(t.shape)
    if tp == 1 or split == "replicated":
        return t.shape
    if split == "row":
        shape[-1] = -(-shape[-1] // tp)
    else:  # column, vocab and kv cut the output rows (a bias: its only dimension)
        axis = -2 if len(shape) >= 2 else 0
        if split == "kv":
            shape[axis] = shape[axis] // kv_heads * max(1, kv_heads // tp)
        else:
            shape[axis] = -(-shape[axis] // tp)
    return tuple(shape)


@lru_cache(maxsize=512)
def _weight_bytes(cfg: TransformerConfig, fmt_id: str, group_size: int, keep: tuple[str, ...], base: str,
                  tp: int) -> dict:
    fmt = FORMATS[fmt_id]
    base_fmt = FORMATS[base]
    memo: dict[tuple[str, tuple[int, ...]], int] = {}
    fallbacks: dict[tuple[str, str], int] = {}

    def nbytes(storage: str, shape: tuple[int, ...], what: str) -> int:
        key = (storage, shape)
        if key not in memo:
            if storage in ggml.GGML_BLOCK:
                memo[key] = ggml.ggml_bytes(storage, shape)
            else:
                memo[key] = matrix_bytes(base_fmt if storage == base else fmt, shape, group_size, what)
        return memo[key]

    total = per_gpu = quantized = params = 0
    by_component = dict.fromkeys(COMPONENTS, 0)
    by_storage: dict[str, int] = {}
    stored_in_format = set()
    for t in model_tensors(cfg):
        storage, in_format = _storage(fmt, t, keep, base, cfg, fallbacks)
        size = nbytes(storage, t.shape, t.gguf_name)
        total += size
        params += t.params
        by_component[t.component] += size
        by_storage[storage] = by_storage.get(storage, 0) + size
        if in_format:
            quantized += t.params
            stored_in_format.add(t.component)
        piece = _shard(t, tp, cfg.kv_heads)
        if piece == t.shape:
            per_gpu += size
            continue
        try:
            per_gpu += nbytes(storage, piece, f"{t.gguf_name}'s shard")
        except InvalidInput as refused:
            raise InvalidInput("tensor_parallel", f"{tp} ranks cut {t.gguf_name} to {piece}: "
                               f"{refused.message}") from None
    present = [c for c, n in by_component.items() if n]
    notes = _notes(fmt, keep, base, tp, cfg)
    warnings = [f"{name}: {why} ({n} tensor{'s' if n > 1 else ''})" for (name, why), n in fallbacks.items()]
    return dict(format=fmt.id, format_name=fmt.name, total_bytes=total, per_gpu_bytes=per_gpu,
                tensor_parallel=tp, params=params, quantized_params=quantized,
                unquantized_params=params - quantized, bits_per_weight=8 * total / params,
                by_component={c: by_component[c] for c in present},
                by_storage=dict(sorted(by_storage.items(), key=lambda kv: -kv[1])),
                kept=tuple(c for c in present if c not in stored_in_format),
                base_dtype=base, warnings=tuple(warnings), notes=tuple(notes))


def _notes(fmt: WeightFormat, keep: tuple[str, ...], base: str, tp: int, cfg: TransformerConfig) -> list[str]:
    notes = [f"{fmt.name}: {fmt.layout} ({fmt.source})."]
    if fmt.kind == "gguf":
        notes.append("Types per tensor follow llama.cpp's llama_tensor_get_type without an importance "
                     "matrix: 1-D tensors, norms, routers and position embeddings stay F32"
                     + ("; the tied token embedding takes the output tensor's type" if cfg.tied_embeddings
                        else "") + ". Tensor data only: a .gguf file adds its metadata (the tokenizer, "
                     "under a megabyte for a 32k vocabulary).")
    elif fmt.kind != "float":
        notes.append(f"Norms and biases stay in {base}.")
    if cfg.router_score_correction:
        notes.append("The router's score-correction bias is a buffer, not a parameter: not counted.")
    if keep:
        notes.append(f"Kept in {base}: {', '.join(keep)}.")
    if tp > 1:
        notes.append(f"Per GPU over {tp} tensor-parallel ranks: column, row and vocabulary splits divided "
                     "with ceiling (the largest rank), norms, routers, latent down projections and "
                     "row-parallel biases replicated"
                     + (f", key/value heads replicated past n_kv_heads ({cfg.kv_heads})"
                        if blocks.model_attention(cfg).kv_replicas(tp) > 1 else "") + ".")
    return notes
