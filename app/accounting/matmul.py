"""Matmul time by shape and dtype: what share of the dense peak a layer's GEMMs really reach.

One (m x k) @ (k x n) GEMM takes

    seconds = max(compute, memory)
    compute = waves x (SMs x tile_m x tile_n x 2k) / MAMF       (tile and wave quantization)
    waves   = ceil(tiles / SMs),  tiles = ceil(m / tile_m) x ceil(n / tile_n)
    memory  = (operand bytes x (m k + k n) + output bytes x m n) / memory bandwidth

MAMF, the Maximum Achievable Matmul FLOPS, is the ceiling: what torch.mm reaches on its best large
shape (stas00/ml-engineering, compute/accelerator/benchmarks/mamf-finder.py; the table per part in
its compute/accelerator/README.md, copied with its rows into data/matmul.toml). Below it, a GEMM
pays for whole tiles and whole waves (NVIDIA, "Matrix Multiplication Background User's Guide",
sections 2.3 and 3: cuBLAS's most efficient tiles are 256x128 and 128x256; thread blocks run in
waves of one per SM, and a wave costs the same full or not), and a thin one waits on memory (its
arithmetic intensity under the part's FLOP/byte ridge). The tile is oriented whichever way needs
fewer waves, as cuBLAS offers both, and a side longer than its dimension shrinks to fit it (m = 1
gets an 8-row tile); smaller square tiles, split-K and stream-K kernels, which cuBLAS picks for
small problems, are not modelled, so GEMMs of under a wave or two are timed pessimistically.

A layer's GEMMs (layer_gemms) are read from its blocks' weight list (app/accounting/blocks/), as
Megatron-LM runs them: q, k and v fused into one column-parallel linear_qkv, gate and up into one
linear_fc1, the output and down projections row-parallel (Shoeybi et al. 2019, arXiv:1909.08053,
section 3): a column split divides n by the tensor-parallel size, a row split divides k. Routed
experts run as one grouped GEMM over each rank's n_experts / ep experts, each with the expected
tokens x top_k x ep / n_experts rows (routing assumed balanced). Backward is two GEMMs per forward
one: dgrad (m x n) @ (n x k) and wgrad (k x m) @ (m x n). The attention core (Q K^T, P V) runs as
FlashAttention does, at its published efficiency (data/matmul.toml, [attention]), over the causal
half of the score matrix it really computes.

Everything here is one GPU's share of one micro-batch. step_matmul (cached) answers the training
plan: seconds of forward and backward, and the efficiency that would stand in for a scalar.
"""

import math
import tomllib
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Literal, NamedTuple

from app.accounting import blocks, hardware
from app.accounting.blocks.base import Causal
from app.accounting.calibration.surface import Surface
from app.accounting.dtypes import lookup, peak_key
from app.accounting.errors import InvalidInput
from app.accounting.hardware import CUSTOM_VENDOR, Accelerator, peak_flop_per_sec
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

TFLOPS = 1e12  # FLOP/s in one TFLOPS, as the MAMF table and the FlashAttention papers write them

# FlashAttention counts its backward as 2.5 forwards (five matmuls against two: it recomputes
# Q K^T), FlashAttention-2 section 4.1; its backward TFLOPS are in that count.
FLASH_BACKWARD_MATMULS_PER_FORWARD = 2.5

# Megatron-LM's fused linears: linear_qkv (megatron/core/transformer/attention.py) and linear_fc1,
# which holds gate and up together for gated MLPs (megatron/core/transformer/mlp.py).
_FUSED = {"q": "qkv", "k": "qkv", "v": "qkv", "qkv": "qkv", "gate": "fc1", "up": "fc1", "gate_up": "fc1"}


# ---- the data file ---------------------------------------------------------------------------

class _Mamf(NamedTuple):
    tflops: float
    theory_tflops: float

    @property
    def share(self) -> float:
        return self.tflops / self.theory_tflops


class _Row(NamedTuple):
    sm_count: int | None
    attention: str
    mamf: dict[str, _Mamf]


class _Table(NamedTuple):
    gpus: dict[str, _Row]
    fallback: dict[str, float]
    tile: tuple[int, int, int]  # long side, short side, tiles per SM at once
    attention: dict[str, tuple[str, float, float]]  # kernel -> (reference gpu, fwd, bwd TFLOPS)


@cache
def table() -> _Table:
    data = tomllib.loads(resources.files("app.accounting").joinpath("data/matmul.toml").read_text())
    gpus = {}
    for row in data["gpu"]:
        mamf = {k: _Mamf(v["tflops"], v["theory_tflops"]) for k, v in row.get("mamf", {}).items()}
        gpus[row["id"]] = _Row(row.get("sm_count"), row["attention"], mamf)
    fb = data["fallback"]
    tile = data["tile"]
    attention = {k: (v["reference_gpu"], v["forward_tflops"], v["backward_tflops"])
                 for k, v in data["attention"].items()}
    return _Table(gpus, {"bfloat16": fb["bfloat16_share"], "float8": fb["float8_share"]},
                  (tile["long_side"], tile["short_side"], tile["per_sm"]), attention)


def mamf_share(gpu_id: str | None, key: str) -> float:
    """MAMF / dense peak for a peak key (bfloat16, float8, ...) on a catalogue part; the fallback
    share (data/matmul.toml, [fallback], with its reasoning) where none was measured."""
    t = table()
    mamf = t.gpus[gpu_id].mamf if gpu_id in t.gpus else {}
    bf16 = mamf["bfloat16"].share if "bfloat16" in mamf else t.fallback["bfloat16"]
    if key == "float8":
        if "float8" in mamf:
            return mamf["float8"].share
        return bf16 if "bfloat16" in mamf else t.fallback["float8"]
    return bf16  # bfloat16, float16 (the same tensor cores) and the unmeasured rest


# ---- one device, one dtype -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MatmulDevice:
    """What GEMM timing needs of one GPU in one dtype; hashable, so results can be cached."""

    peak_flop_per_sec: float
    """Dense peak of the GEMMs' dtype, FLOP/s."""
    mamf_flop_per_sec: float
    """The achievable ceiling: peak x the part's measured MAMF share."""
    memory_bandwidth_bytes_per_sec: float
    sm_count: int | None
    """Wave size (SMs x tiles per SM); None times GEMMs without waves (TPUs, custom parts)."""
    operand_bytes: float
    output_bytes: float
    """Float8 GEMMs write bfloat16 (Transformer Engine), so never under 2 bytes."""
    attention_forward_flop_per_sec: float
    """FlashAttention's forward rate on this part, in its FLOP count (bfloat16)."""
    attention_backward_flop_per_sec: float
    """Its backward rate, in its count (2.5 forwards)."""
    surface: Surface | None = None
    """A calibration profile's matmul surface (app/accounting/calibration/surface.py): each GEMM's
    compute then takes what this device measured at shapes near it, in place of waves at MAMF."""

    __pydantic_config__ = RECORD


def device(acc: Accelerator, dtype: str, *, field: str = "dtype") -> MatmulDevice:
    """The matmul view of a catalogue part (overrides applied) or a custom one in `dtype`: custom
    parts take the fallback shares and no waves (their SM count is unknown)."""
    t = table()
    known = acc.vendor != CUSTOM_VENDOR and acc.id in t.gpus
    gpu_id = acc.id if known else None
    peak = peak_flop_per_sec(acc, dtype, field=field)
    operand = lookup(dtype, field=field).storage_bytes
    # The attention core stays in bfloat16 whatever the GEMMs run in.
    bf16_peak = acc.peak_flop_per_sec.get("bfloat16", peak)
    bf16_mamf = bf16_peak * mamf_share(gpu_id, "bfloat16")
    ref, fwd, bwd = t.attention[t.gpus[gpu_id].attention if known else "fa2"]
    # The reference part's MAMF as this engine computes it, so the reference runs at the paper's rate.
    ref_mamf = hardware.catalogue()[ref].peak_flop_per_sec["bfloat16"] * mamf_share(ref, "bfloat16") / TFLOPS
    sm = t.gpus[gpu_id].sm_count if known else None
    return MatmulDevice(
        peak_flop_per_sec=peak, mamf_flop_per_sec=peak * mamf_share(gpu_id, peak_key(dtype, field=field)),
        memory_bandwidth_bytes_per_sec=acc.memory_bandwidth_bytes_per_sec,
        sm_count=None if sm is None else sm * t.tile[2], operand_bytes=operand,
        output_bytes=max(2, operand), attention_forward_flop_per_sec=bf16_mamf * fwd / ref_mamf,
        attention_backward_flop_per_sec=bf16_mamf * bwd / ref_mamf)


@cache
def for_gpu(gpu_id: str, dtype: str) -> MatmulDevice:
    """device() of a catalogue id with no overrides."""
    return device(hardware.gpu(gpu_id), dtype)


# ---- one GEMM --------------------------------------------------------------------------------

class Gemm(NamedTuple):
    """(m x k) @ (k x n), `groups` times in one grouped kernel (routed experts)."""

    name: str
    m: int
    n: int
    k: int
    groups: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.groups * self.m * self.n * self.k


class Waves(NamedTuple):
    tiles: int
    waves: int
    tile_m: int
    tile_n: int


def _side(tile: int, dim: int) -> int:
    """A tile side facing a dimension narrower than it shrinks to the power of two that holds the
    dimension, at least 8: cuBLASLt's tiles go down to 8 wide (cublasLtMatmulTile_t, TILE_8x64 to
    TILE_512x64), so a decode-like m = 1 is not charged 256 rows."""
    return min(tile, max(8, 1 << (dim - 1).bit_length()))


def waves(m: int, n: int, sm_count: int, groups: int = 1) -> Waves:
    """Thread blocks of the output (m x n), `groups` times, and the waves of `sm_count` they run
    in; the 256x128 tile laid whichever way costs less (waves x tile area: a side shrunk to a thin
    m or n makes one way's tiles smaller), then the fewer tiles."""
    long, short, _ = table().tile
    options = []
    for tm, tn in ((long, short), (short, long)):
        tm, tn = _side(tm, m), _side(tn, n)
        tiles = groups * -(-m // tm) * -(-n // tn)
        options.append(Waves(tiles, -(-tiles // sm_count), tm, tn))
    return min(options, key=lambda w: (w.waves * w.tile_m * w.tile_n, w.tiles))


@dataclass(frozen=True, slots=True)
class GemmTime:
    gemm: Gemm
    flops: int
    tiles: int | None
    waves: int | None
    compute_seconds: float
    """Whole waves at the MAMF rate (FLOPs / MAMF where the part has no SM count)."""
    memory_seconds: float
    """Operands read once and the output written once, at the datasheet bandwidth."""
    seconds: float
    bound: Literal["compute", "memory"]

    __pydantic_config__ = RECORD


def gemm_time(g: Gemm, dev: MatmulDevice) -> GemmTime:
    """Seconds of one GEMM on one GPU: the slower of its quantized compute and its memory traffic."""
    if g.m <= 0 or g.n <= 0 or g.k <= 0:
        return GemmTime(g, 0, 0, 0, 0.0, 0.0, 0.0, "compute")
    tiles = wave_count = None
    if dev.surface is not None:
        compute = dev.surface.seconds(g.m, g.k, g.n, g.groups)
    elif dev.sm_count is None:
        compute = g.flops / dev.mamf_flop_per_sec
    else:
        w = waves(g.m, g.n, dev.sm_count, g.groups)
        tiles, wave_count = w.tiles, w.waves
        # A wave is sm_count tiles of 2 x tile_m x tile_n x k FLOPs, busy or idle alike.
        compute = w.waves * dev.sm_count * 2 * w.tile_m * w.tile_n * g.k / dev.mamf_flop_per_sec
    nbytes = g.groups * (dev.operand_bytes * (g.m * g.k + g.k * g.n) + dev.output_bytes * g.m * g.n)
    memory = nbytes / dev.memory_bandwidth_bytes_per_sec
    return GemmTime(g, g.flops, tiles, wave_count, compute, memory, max(compute, memory),
                    "compute" if compute >= memory else "memory")


def gemm_seconds(m: int, n: int, k: int, dev: MatmulDevice, groups: int = 1) -> float:
    return gemm_time(Gemm("gemm", m, n, k, groups), dev).seconds


# ---- a layer's GEMMs -------------------------------------------------------------------------

def _ceil(a: int | float, b: int) -> int:
    return math.ceil(a / b)


def layer_gemms(layer: blocks.Layer, tokens: int, tp: int = 1, expert_parallel: int = 1) -> tuple[Gemm, ...]:
    """The forward GEMMs of one layer on one of `tp` tensor ranks, for `tokens` tokens of the
    micro-batch (every tensor rank sees them all; sequence parallelism gathers them first)."""
    cfg = layer.attention.cfg
    kv_ranks = min(tp, cfg.kv_heads)  # past n_kv_heads ranks, each keeps one key/value head
    groups: dict[tuple[str, str], list] = {}
    for w in layer.weights():
        if w.module is None or len(w.shape) < 2:
            continue
        *experts, rows, cols = w.shape
        if w.tp_split in ("column", "vocab"):
            rows = _ceil(rows, tp)
        elif w.tp_split == "kv":
            rows = _ceil(rows, kv_ranks)
        elif w.tp_split == "row":
            cols = _ceil(cols, tp)
        key = (w.component, _FUSED.get(w.module, w.module))
        n, k, e = groups.get(key, (0, cols, experts[0] if experts else 0))
        groups[key] = (n + rows, k, e)
    out = []
    for (component, module), (n, k, e) in groups.items():
        shared = component not in ("attention", "mlp", "router", "routed_experts")
        name = f"{component}.{module}" if shared else module
        if e:  # routed experts: the expected rows per expert, over this rank's experts
            per_rank = _ceil(e, expert_parallel)
            m = _ceil(tokens * cfg.top_k * expert_parallel, e)
            out.append(Gemm(name, m, n, k, per_rank))
        else:
            out.append(Gemm(name, tokens, n, k))
    return tuple(out)


def backward_gemms(forward: tuple[Gemm, ...]) -> tuple[Gemm, ...]:
    """dgrad: dX (m x k) = dY (m x n) @ W^T (n x k); wgrad: dW (k x n) = X^T (k x m) @ dY (m x n)."""
    out = []
    for g in forward:
        out += [Gemm(f"{g.name}.dgrad", g.m, g.k, g.n, g.groups),
                Gemm(f"{g.name}.wgrad", g.k, g.n, g.m, g.groups)]
    return tuple(out)


def head_gemm(cfg: TransformerConfig, tokens: int, tp: int = 1) -> Gemm:
    """The LM head, vocabulary-parallel: (tokens x d_model) @ (d_model x vocab / tp)."""
    return Gemm("lm_head", tokens, _ceil(cfg.vocab_size, tp), cfg.d_model)


def attention_core_seconds(layer: blocks.Layer, *, batch: int, seq_len: int, tp: int,
                           dev: MatmulDevice) -> tuple[float, float]:
    """(forward, backward) seconds of Q K^T and P V as FlashAttention runs them: heads split over
    tensor ranks, only the causal half (or the window) computed, at its published rates."""
    done = layer.attention.forward_flops(batch=batch, seq_len=seq_len, causal="halved")
    core = (done["attention_scores"] + done["attention_values"] + done.get("mixer_scan", 0)) / tp
    return (core / dev.attention_forward_flop_per_sec,
            FLASH_BACKWARD_MATMULS_PER_FORWARD * core / dev.attention_backward_flop_per_sec)


# ---- a micro-batch of the whole model --------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MatmulTimes:
    """One micro-batch on one GPU of `tp`: matmul seconds by pass, and what share of the dense
    peak they amount to. Layers are all n_layers (a pipeline stage holds its share of them)."""

    forward_layers_seconds: float
    """Every layer's forward GEMMs and attention core."""
    backward_layers_seconds: float
    """dgrad and wgrad of every GEMM, and the attention core's backward."""
    attention_core_forward_seconds: float
    """The attention core's share of forward_layers_seconds (what selective recompute redoes)."""
    attention_core_backward_seconds: float
    head_forward_seconds: float
    head_backward_seconds: float
    forward_flops: float
    """Forward matmul FLOPs per GPU (the model's / tp), counted with `causal` as flops.py does."""
    forward_efficiency: float
    """forward_flops / (forward seconds x dense peak), layers and head together."""
    backward_efficiency: float
    """2 x forward_flops (the engine's backward count) / (backward seconds x dense peak)."""
    efficiency: float
    """3 x forward_flops / (forward and backward seconds x dense peak): what replaces a scalar
    compute efficiency in the plan."""
    layer_gemm_efficiency: float
    """The layers' GEMMs alone (no attention core, no head), forward and backward: the shape
    effect the MAMF ceiling and quantization leave."""

    __pydantic_config__ = RECORD


@lru_cache(maxsize=16384)
def step_matmul(cfg: TransformerConfig, *, seq_len: int, micro_batch: int, tp: int, dev: MatmulDevice,
                expert_parallel: int = 1, causal: Causal = "full") -> MatmulTimes:
    """Matmul seconds of one micro-batch (micro_batch x seq_len tokens) on one of `tp` tensor
    ranks. `causal` only says how FLOPs are counted for the efficiencies (flops.py's convention:
    "full", as the plan counts them); the attention core's time is always what FlashAttention does."""
    for name, value in (("seq_len", seq_len), ("micro_batch", micro_batch), ("tensor_parallel", tp),
                        ("expert_parallel", expert_parallel)):
        if type(value) is not int or value < 1:
            raise InvalidInput(name, f"must be a positive integer, got {value!r}")
    if cfg.position == "learned" and seq_len > cfg.max_seq_len:
        raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {cfg.max_seq_len} learned positions")
    tokens = micro_batch * seq_len
    fwd = bwd = core_f = core_b = gemm_s = gemm_flops = counted = 0.0
    for layer, count in blocks.distinct(cfg):
        forward = layer_gemms(layer, tokens, tp, expert_parallel)
        f = sum(gemm_time(g, dev).seconds for g in forward)
        b = sum(gemm_time(g, dev).seconds for g in backward_gemms(forward))
        cf, cb = attention_core_seconds(layer, batch=micro_batch, seq_len=seq_len, tp=tp, dev=dev)
        fwd, bwd = fwd + count * (f + cf), bwd + count * (b + cb)
        core_f, core_b = core_f + count * cf, core_b + count * cb
        gemm_s += count * (f + b)
        gemm_flops += count * 3 * sum(g.flops for g in forward)
        parts = layer.attention.forward_flops(batch=micro_batch, seq_len=seq_len, causal=causal)
        counted += count * (sum(parts.values()) + sum(layer.mlp.forward_flops(tokens).values())) / tp
    head = head_gemm(cfg, tokens, tp)
    head_f = gemm_time(head, dev).seconds
    head_b = sum(gemm_time(g, dev).seconds for g in backward_gemms((head,)))
    counted += 2 * tokens * cfg.d_model * cfg.vocab_size / tp
    peak = dev.peak_flop_per_sec
    return MatmulTimes(
        forward_layers_seconds=fwd, backward_layers_seconds=bwd, attention_core_forward_seconds=core_f,
        attention_core_backward_seconds=core_b, head_forward_seconds=head_f, head_backward_seconds=head_b,
        forward_flops=counted, forward_efficiency=counted / ((fwd + head_f) * peak),
        backward_efficiency=2 * counted / ((bwd + head_b) * peak),
        efficiency=3 * counted / ((fwd + bwd + head_f + head_b) * peak),
        layer_gemm_efficiency=gemm_flops / (gemm_s * peak))


def step_matmul_efficiency(cfg: TransformerConfig, *, seq_len: int, micro_batch: int, tp: int,
                           gpu_id: str, dtype: str = "bfloat16", expert_parallel: int = 1) -> float:
    """The share of the dense peak one micro-batch's matmuls reach on a catalogue part: the plan's
    compute_efficiency, from shapes instead of a scalar."""
    return step_matmul(cfg, seq_len=seq_len, micro_batch=micro_batch, tp=tp, dev=for_gpu(gpu_id, dtype),
                       expert_parallel=expert_parallel).efficiency
