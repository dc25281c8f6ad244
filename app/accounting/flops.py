"""FLOP counts. One multiply-add (MAC) is 2 FLOPs. Only matmuls are counted,
as torch.utils.flop_counter.FlopCounterMode and the 6ND rule count them:
norms, softmax, activations and residual adds are left out (well under 1%
of a large model's total)."""

from dataclasses import dataclass
from operator import attrgetter

from app.accounting import blocks
from app.accounting.blocks.base import Causal, score_pairs_doubled
from app.accounting.dtypes import lookup
from app.accounting.errors import InvalidInput
from app.accounting.models import ParamCount, TransformerConfig, count_params
from app.accounting.records import RECORD

__all__ = ["Causal", "score_pairs_doubled", "matmul", "mlp", "transformer_forward", "transformer",
           "MatmulFlops", "LinearFlops", "MlpFlops", "FlopsBreakdown", "TransformerFlops"]


@dataclass(slots=True)
class MatmulFlops:
    """(batch, m, k) @ (batch, k, n) -> (batch, m, n)."""

    m: int
    k: int
    n: int
    batch: int
    flops: int
    """2*batch*m*k*n: one multiply and one add per MAC."""
    macs: int
    """batch*m*k*n multiply-accumulates."""
    flops_without_fma: int
    """batch*m*n*(2k-1): k multiplies and k-1 adds per output, without fused multiply-add."""
    dtype: str | None
    bytes: int | None
    """Least memory traffic with a dtype: read both operands once, write the result once."""
    arithmetic_intensity: float | None
    """flops / bytes: FLOPs per byte moved, the x-axis of a roofline."""

    __pydantic_config__ = RECORD


def matmul(m: int, k: int, n: int, batch: int = 1, dtype: str | None = None) -> MatmulFlops:
    macs = batch * m * k * n
    nbytes = intensity = None
    if dtype is not None:
        nbytes = int(lookup(dtype).storage_bytes * batch * (m * k + k * n + m * n))
        intensity = 2 * macs / nbytes
    return MatmulFlops(
        m=m, k=k, n=n, batch=batch, flops=2 * macs, macs=macs,
        flops_without_fma=batch * m * n * (2 * k - 1),
        dtype=None if dtype is None else lookup(dtype).name, bytes=nbytes,
        arithmetic_intensity=intensity,
    )


@dataclass(slots=True)
class LinearFlops:
    """One bias-free linear layer y = x @ W with W of shape (d_in, d_out)."""

    d_in: int
    d_out: int
    params: int
    forward: int
    """2*B*d_in*d_out."""
    backward_weight: int
    """dL/dW = x^T @ dL/dy: 2*B*d_in*d_out."""
    backward_input: int
    """dL/dx = dL/dy @ W^T: 2*B*d_in*d_out, or 0 when nothing upstream needs it."""
    backward: int

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class MlpFlops:
    """The course's stack of bias-free linear layers, exact and approximate."""

    batch: int
    dims: list[int]
    input_requires_grad: bool
    layers: list[LinearFlops]
    params: int
    tokens: int
    forward: int
    backward: int
    total: int
    approx_forward: int
    """2 x tokens x params."""
    approx_backward: int
    """4 x tokens x params."""
    approx_total: int
    """6 x tokens x params."""

    __pydantic_config__ = RECORD


def mlp(batch: int, dims: list[int], input_requires_grad: bool = False) -> MlpFlops:
    """FLOPs of x(B, D0) -> W1(D0, D1) -> ... -> W_n(D_{n-1}, D_n)."""
    if len(dims) < 2:
        raise InvalidInput("dims", "needs at least two widths (one layer)")
    layers = []
    for i, (d_in, d_out) in enumerate(zip(dims, dims[1:], strict=False)):
        f = 2 * batch * d_in * d_out
        grad_in = f if (i > 0 or input_requires_grad) else 0
        layers.append(LinearFlops(d_in=d_in, d_out=d_out, params=d_in * d_out, forward=f,
                                  backward_weight=f, backward_input=grad_in, backward=f + grad_in))
    params = sum(layer.params for layer in layers)
    forward = sum(layer.forward for layer in layers)
    backward = sum(layer.backward for layer in layers)
    return MlpFlops(
        batch=batch, dims=list(dims), input_requires_grad=input_requires_grad, layers=layers,
        params=params, tokens=batch, forward=forward, backward=backward, total=forward + backward,
        approx_forward=2 * batch * params, approx_backward=4 * batch * params,
        approx_total=6 * batch * params,
    )


@dataclass(slots=True)
class FlopsBreakdown:
    """FLOPs by component, summed over all layers."""

    attention_qkv: int
    """Q, K and V projections; with latent attention, the up projections from the latents
    (and the query projection when queries have no latent)."""
    attention_scores: int
    """Q @ K^T (latent attention: over qk_nope_head_dim + qk_rope_head_dim)."""
    attention_values: int
    """softmax(scores) @ V."""
    attention_output: int
    """The output projection."""
    mlp: int
    """MLPs of dense layers (every layer of a dense model)."""
    lm_head: int
    total: int
    attention_latent: int = 0
    """Latent attention's down projections: x to the query latent, and x to the key/value
    latent with the shared rotary key (kv_lora_rank + qk_rope_head_dim)."""
    router: int = 0
    """x @ W_router (d_model x n_experts) in each MoE layer."""
    routed_experts: int = 0
    """The top_k experts each token is routed to (dropless: tokens x top_k expert MLPs,
    however they spread over experts)."""
    shared_experts: int = 0
    """Shared experts, and Qwen2-MoE's shared-expert gate."""
    mixer_scan: int = 0
    """Mamba-2 and gated DeltaNet layers: their causal convolution and chunked scan's batched matmuls
    (their in and out projections are in attention_qkv and attention_output)."""

    __pydantic_config__ = RECORD

    def scaled(self, factor: int) -> "FlopsBreakdown":
        return FlopsBreakdown(*[factor * v for v in _breakdown_values(self)])


_breakdown_values = attrgetter(*FlopsBreakdown.__dataclass_fields__)


_LAYER_PARTS = ("attention_qkv", "attention_scores", "attention_values", "attention_output", "mlp",
                "attention_latent", "router", "routed_experts", "shared_experts", "mixer_scan")


def transformer_forward(cfg: TransformerConfig, batch_size: int, seq_len: int,
                        causal: Causal = "full") -> FlopsBreakdown:
    """Forward matmul FLOPs of a decoder-only transformer on batch_size x seq_len tokens: each
    layer's blocks (app/accounting/blocks/) and the LM head."""
    if cfg.position == "learned" and seq_len > cfg.max_seq_len:
        raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {cfg.max_seq_len} learned positions")
    return _passes(cfg, batch_size, seq_len, causal)[0]


def _passes(cfg: TransformerConfig, batch_size: int, seq_len: int,
            causal: Causal) -> tuple[FlopsBreakdown, FlopsBreakdown]:
    """(forward, backward): backward is 2x forward but where a token mixer says otherwise (gated
    DeltaNet's chunked rule, blocks/deltanet.py)."""
    t = batch_size * seq_len
    forward, backward = dict.fromkeys(_LAYER_PARTS, 0), dict.fromkeys(_LAYER_PARTS, 0)
    for layer, n in blocks.distinct(cfg):
        mixer = layer.attention
        ahead = mixer.forward_flops(batch=batch_size, seq_len=seq_len, causal=causal)
        back = mixer.backward_flops(batch=batch_size, seq_len=seq_len, causal=causal)
        mlp = layer.mlp.forward_flops(t)
        for name, value in (ahead | mlp).items():
            forward[name] += n * value
        for name, value in (back | {k: 2 * v for k, v in mlp.items()}).items():
            backward[name] += n * value
    lm_head = 2 * t * cfg.d_model * cfg.vocab_size
    return (FlopsBreakdown(**forward, lm_head=lm_head, total=sum(forward.values()) + lm_head),
            FlopsBreakdown(**backward, lm_head=2 * lm_head, total=sum(backward.values()) + 2 * lm_head))


@dataclass(slots=True)
class TransformerFlops:
    """Exact matmul FLOPs of one training step, beside 6ND."""

    model: TransformerConfig
    batch_size: int
    seq_len: int
    tokens: int
    causal: Causal
    params: ParamCount
    forward: FlopsBreakdown
    backward: FlopsBreakdown
    """2 x forward: every matmul needs the gradient of both operands (gated DeltaNet's chunked rule
    differs a little, blocks/deltanet.py)."""
    step: FlopsBreakdown
    """forward + backward (the optimizer's elementwise update is not counted)."""
    six_n_d: int
    """6 x active parameters x tokens (params.total for a dense model)."""
    ratio_to_six_n_d: float
    """step.total / six_n_d: above 1 where attention over long sequences adds FLOPs that
    parameters do not count; below 1 where parameters (embeddings) do no matmul work."""
    attention_fraction: float
    """Share of forward FLOPs in Q @ K^T and softmax @ V."""

    __pydantic_config__ = RECORD


def transformer(cfg: TransformerConfig, batch_size: int, seq_len: int,
                causal: Causal = "full") -> TransformerFlops:
    if cfg.position == "learned" and seq_len > cfg.max_seq_len:
        raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {cfg.max_seq_len} learned positions")
    fwd, bwd = _passes(cfg, batch_size, seq_len, causal)
    params = count_params(cfg)
    tokens = batch_size * seq_len
    six_n_d = 6 * params.active * tokens
    step = FlopsBreakdown(*[f + b for f, b in zip(_breakdown_values(fwd), _breakdown_values(bwd),
                                                   strict=True)])
    return TransformerFlops(
        model=cfg.resolved(), batch_size=batch_size, seq_len=seq_len, tokens=tokens, causal=causal,
        params=params, forward=fwd, backward=bwd, step=step, six_n_d=six_n_d,
        ratio_to_six_n_d=step.total / six_n_d,
        attention_fraction=(fwd.attention_scores + fwd.attention_values) / fwd.total,
    )
