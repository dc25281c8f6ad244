"""Fine-tuning app/bench/models.Transformer as peft and bitsandbytes do: parts frozen, LoRA
adapters beside frozen matrices, a base stored quantized.

peft's LoRA (peft/tuners/lora/layer.py, Linear) wraps a frozen nn.Linear of (in, out) with A
(r x in, kaiming-uniform with a = sqrt(5)) and B (out x r, zeros), and returns
base(x) + B(A(dropout(x))) * alpha / r. The probe fuses QKV and gate+up into one matrix each, so
an adapter on q adds B(A(x)) to the q block of the fused output, and the blocks go on apart
(models.blocks): the same numbers, the same tensors kept for backward and the same gradient
matmuls as peft's adapter on a separate q_proj (A keeps its input x, B keeps A's output,
tokens x r; the scalar product and the sum keep nothing).

QLoRA's base (transformers' bitsandbytes integration): every nn.Linear of the blocks stored in
Linear4bit (nf4, with compress_statistics for double quantization) or Linear8bitLt (int8 with
one fp32 scale per output row); embeddings, the LM head, norms, routers (and a shared expert's
gate) and the routed experts (transformers 5.x's fused 3-D parameters, not nn.Linear modules)
stay in the model's dtype. The fused projections are one quantized matrix each.
"""

import math
from collections.abc import Iterator

import torch
from torch import nn

from app.bench.models import Attention, Experts, Mlp, Transformer
from app.probes.train_step.params import TrainStepParams
from app.probes.train_step.predict import NO_BITSANDBYTES

LORA_ALPHA = 8
"""peft's default lora_alpha; adapters scale B(A(x)) by alpha / r."""


class Adapter(nn.Module):
    """One LoRA pair for a matrix of (fan_in, fan_out): x (..., fan_in) -> (..., fan_out)."""

    def __init__(self, fan_in: int, fan_out: int, rank: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.A = nn.Linear(fan_in, rank, bias=False, dtype=dtype)
        self.B = nn.Linear(rank, fan_out, bias=False, dtype=dtype)
        nn.init.kaiming_uniform_(self.A.weight, a=math.sqrt(5))  # peft's init_lora_weights=True
        nn.init.zeros_(self.B.weight)  # so the adapted model starts as the base
        self.scaling = LORA_ALPHA / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.B(self.A(x)) * self.scaling


class Adapted(nn.Module):
    """A frozen projection with adapters on some of the column blocks of its output. `blocks`
    names each block in order with its width: one block for a plain matrix, (q, k, v) for the
    fused QKV, (gate, up) for the fused gate+up."""

    def __init__(self, base: nn.Module, fan_in: int, blocks: dict[str, int], targets: list[str], rank: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.base, self.blocks = base, blocks
        self.adapters = nn.ModuleDict({t: Adapter(fan_in, width, rank, dtype)
                                       for t, width in blocks.items() if t in targets})

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """(..., out), or for a fused projection its blocks (models.blocks), each (..., width):
        an unadapted block is a view of the frozen output and, as peft's unwrapped k_proj, needs no
        gradient unless x does."""
        y = self.base(x)
        if len(self.blocks) == 1:  # peft's own sum, out of place
            return y + next(iter(self.adapters.values()))(x)
        pieces = y.split(list(self.blocks.values()), dim=-1)
        return tuple(piece + self.adapters[t](x) if t in self.adapters else piece
                     for t, piece in zip(self.blocks, pieces, strict=True))


def _projections(model: Transformer) -> Iterator[tuple[nn.Module, str, dict[str, int]]]:
    """(owner, attribute, {target: width} in output order) for every matrix a target names:
    attention's QKV and output, and the MLPs that are nn.Linear modules by name in transformers
    (dense MLPs, shared experts). A model that fuses q, k, v (or gate and up) into one module in
    transformers has one target for it: qkv (gate_up)."""
    cfg = model.cfg
    for block in model.blocks:
        attn = getattr(block.attn, "attention", block.attn)  # Falcon-H1's attention beside its Mamba-2
        if isinstance(attn, Attention):
            q, kv = attn.q_width + attn.gate_width, attn.kv_width  # q_proj makes the output gate too
            yield attn, "qkv", {"qkv": q + 2 * kv} if cfg.fused_qkv else {"q": q, "k": kv, "v": kv}
            yield attn, "out", {"o": attn.out.out_features}
        mlp = block.mlp.shared if isinstance(block.mlp, Experts) else block.mlp
        if mlp is not None:
            w = mlp.width
            up = {"gate_up": 2 * w} if cfg.fused_gate_up else {"gate": w, "up": w}
            yield mlp, "up", up if mlp.gated else {"up": w}
            yield mlp, "down", {"down": mlp.down.out_features}


def _quantized_linears(model: Transformer) -> Iterator[tuple[nn.Module, str]]:
    """Every nn.Linear of the blocks transformers' bitsandbytes integration swaps: attention's,
    dense MLPs' and shared experts'; not routers, a shared expert's gate, nor routed experts."""
    for block in model.blocks:
        if isinstance(block.attn, Attention):
            yield block.attn, "qkv"
            yield block.attn, "out"
        mlps = [block.mlp] if isinstance(block.mlp, Mlp) else [getattr(block.mlp, "shared", None)]
        for mlp in filter(None, mlps):
            yield mlp, "up"
            yield mlp, "down"


def quantize(model: Transformer, base_format: str, compute_dtype: torch.dtype) -> None:
    """Swap the blocks' matrices for bitsandbytes' modules holding them in `base_format`, on the
    model's device (moving a bitsandbytes parameter to a device quantizes it there)."""
    try:
        import bitsandbytes as bnb
    except ImportError as e:
        raise RuntimeError(f"{NO_BITSANDBYTES}: {e}") from e
    for owner, name in _quantized_linears(model):
        linear: nn.Linear = getattr(owner, name)
        device, bias = linear.weight.device, linear.bias is not None
        if base_format == "int8_channel":  # int8 (out, in), fp32 scale per row (SCB); no outliers
            q = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=bias,
                                    has_fp16_weights=False, threshold=0.0)
            q.weight = bnb.nn.Int8Params(linear.weight.data, requires_grad=False, has_fp16_weights=False)
        else:  # nf4 codes packed two a byte, one absmax per 64 weights (uint8 under double quantization)
            double = base_format == "nf4_double_quant"
            q = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=bias,
                                  compute_dtype=compute_dtype, compress_statistics=double, quant_type="nf4")
            q.weight = bnb.nn.Params4bit(linear.weight.data, requires_grad=False, compress_statistics=double,
                                         quant_type="nf4")
        if bias:
            q.bias = nn.Parameter(linear.bias.data, requires_grad=False)
        setattr(owner, name, q.to(device))


def quant_state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Tensors a quantized base holds beside its parameters (absmax, codes, int8 row scales),
    which model.parameters() does not list."""
    out: list[torch.Tensor] = []
    for module in model.modules():
        weight = getattr(module, "weight", None)
        state = getattr(weight, "quant_state", None)
        while state is not None:  # a double-quantized absmax has a state of its own (state2)
            out += [t for t in (state.absmax, state.code, getattr(state, "offset", None))
                    if isinstance(t, torch.Tensor)]
            state = getattr(state, "state2", None)
        for holder in (weight, getattr(module, "state", None)):
            scales = getattr(holder, "SCB", None)
            if isinstance(scales, torch.Tensor):
                out.append(scales)
    return out


def freeze(model: Transformer, *, embeddings: bool, head: bool, layers: int) -> None:
    """requires_grad off on the token (and position) embedding, the head, the first `layers`
    blocks. A tied head is the embedding's tensor: the parameters' check refuses one without
    the other."""
    parts: list[nn.Module] = list(model.blocks[:layers])
    if embeddings:
        parts += [t for t in (model.tok, model.pos) if t is not None]
    if head:
        parts.append(model.head)
    for part in parts:
        part.requires_grad_(False)


def adapt(model: Transformer, targets: list[str], rank: int) -> None:
    """Freeze the whole base and put adapters, in the parameters' dtype, on every matrix a target names."""
    dtype = model.tok.weight.dtype
    model.requires_grad_(False)
    for owner, name, blocks in _projections(model):
        if set(blocks) & set(targets):
            base = getattr(owner, name)
            with torch.device(model.tok.weight.device):
                setattr(owner, name, Adapted(base, base.in_features, blocks, targets, rank, dtype))


def fine_tune(model: Transformer, p: TrainStepParams, targets: tuple[str, ...],
              compute_dtype: torch.dtype) -> None:
    """Make `model` the fine-tune `p` asks for (mode full leaves it as it is); `targets` are the
    adapted ones, the family's default filled in."""
    if p.mode == "freeze":
        freeze(model, embeddings=p.freeze_embeddings, head=p.freeze_head, layers=p.freeze_layers)
    if p.mode == "qlora":
        quantize(model, p.base_format, compute_dtype)
    if p.mode in ("lora", "qlora"):
        adapt(model, list(targets), p.lora_rank)


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [param for param in model.parameters() if param.requires_grad]


def assumptions(p: TrainStepParams, targets: tuple[str, ...]) -> list[str]:
    """How the fine-tune was built, for the result."""
    if p.mode == "freeze":
        return ["freeze: requires_grad off on the frozen parts; the optimizer holds only the rest"]
    if p.mode == "full":
        return []
    notes = [f"{p.mode}: every base weight frozen; adapters of rank {p.lora_rank} on "
             f"{', '.join(targets)} (peft's init, alpha {LORA_ALPHA}, no dropout) in the parameters' "
             "dtype, added to their columns of the fused QKV and gate+up projections"]
    if p.mode == "qlora":
        import bitsandbytes

        module = "Linear8bitLt" if p.base_format == "int8_channel" else "Linear4bit"
        notes.append(f"qlora: the blocks' matrices in bitsandbytes {bitsandbytes.__version__} {module} "
                     f"({p.base_format}); embeddings, head, norms, routers and routed experts left in the "
                     "model's dtype")
    return notes
