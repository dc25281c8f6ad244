"""Gated DeltaNet linear attention (Yang et al. 2024, arXiv:2412.06464) as a layer's token mixer:
Qwen3-Next's linear_attention layers (layer_mixers "gated_delta_net").

With d = d_model, Hk query/key heads of dk, Hv value heads of dv (kd = Hk dk, vd = Hv dv), the
convolution's channels cd = 2 kd + vd and width K:
  weights   in_proj_qkvz (2 kd + 2 vd, d): q, k, v and the output gate z; in_proj_ba (2 Hv, d): the
            delta rule's beta and the decay's a; conv1d taps (cd, 1, K), no bias; dt_bias and A_log of
            Hv; the gated RMSNorm's weight (dv, shared by the heads); out_proj (d, vd). No biases
  FLOPs     as FlopCounterMode counts transformers 5.23's torch_chunk_gated_delta_rule (the path
            without the fla kernels): the projections 2 t d (2 kd + 2 vd + 2 Hv) and 2 t vd d; the
            depthwise conv1d with padding K - 1, 2 B cd K (S + K - 1); over n = cdiv(S, 64) chunks of
            C = 64 (the sequence zero-padded), with q and k repeated to the Hv value heads:
              k_beta k^T and q k^T    2 x 2 B Hv n C^2 dk
              per chunk, in order     k_cumdecay S, q S and the state update k^T v: 3 x 2 B Hv n C dk dv;
                                      the intra-chunk attention times v: 2 B Hv n C^2 dv
            The two triangular solves (B Hv n C^2 (dk + dv)) are not in FlopCounterMode's table and
            are not counted; backward counts their A gradients, 2 B Hv n C^2 (dk + dv), as matmuls.
            Backward is otherwise 2x forward, less the first chunk's state (zeros, no gradient) and
            the last chunk's state update (discarded): 2 B Hv C dk dv x (1 + 1 + 2). FlopCounterMode's
            count of conv1d's weight gradient ignores its groups (a dense cd^2 K convolution); Tally
            counts the depthwise one
  saved     as transformers' Qwen3NextGatedDeltaNet trains with fla's kernels: the gate z (vd), which
            the gated norm reads, a copy (its reshape to value heads cannot view in_proj_qkvz's
            per-key-head layout, so the projection's output is not kept), the concatenated q, k, v that
            causal_conv1d_fn keeps (cd), and what chunk_gated_delta_rule keeps
            (fla/ops/gated_delta_rule/chunk.py at bc3b101, use_qk_l2norm_in_kernel): contiguous
            q and k (l2-normed) and v (cd together), beta (Hv), the decay (Hv, float32; beside it
            softplus's input and output, 2 Hv float32, are autograd's) and A, the solved WY matrix
            (Hv x 64 a token, k's dtype); the chunk states are recomputed in backward. Then the gated
            norm's input and out_proj's (vd each)
  state     per sequence: the convolution's last inputs, cd x K in transformers' cache and (K - 1) x
            cd in vLLM's, and the recurrent state Hv x dk x dv, float32 in transformers
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Causal, Item, Recompute, State, Weight, linear
from app.accounting.blocks.state_mixer import StateMixer

CHUNK_TOKENS = 64
"""torch_chunk_gated_delta_rule's chunk_size (transformers 5.23 models/qwen3_next); fla's kernels
use 64 as well."""
FP32 = 4


@dataclass(frozen=True)
class GatedDeltaNet(StateMixer):
    kind: ClassVar[str] = "gated_delta_net"
    label: ClassVar[str] = "gated DeltaNet"

    @property
    def key_width(self) -> int:
        return self.cfg.linear_key_heads * self.cfg.linear_key_head_dim

    @property
    def value_width(self) -> int:
        return self.cfg.linear_value_heads * self.cfg.linear_value_head_dim

    @property
    def conv_channels(self) -> int:
        return 2 * self.key_width + self.value_width

    @property
    def conv_kernel(self) -> int:
        return self.cfg.linear_conv_kernel

    @property
    def in_width(self) -> int:
        return 2 * self.key_width + 2 * self.value_width + 2 * self.cfg.linear_value_heads

    def _weights(self) -> list[Weight]:
        cfg, d, hv = self.cfg, self.cfg.d_model, self.cfg.linear_value_heads
        qkvz = 2 * self.key_width + 2 * self.value_width
        return (
            linear("ssm_in", qkvz, d, "attention", "column", False, module="in_proj_qkvz")
            + linear("ssm_ba", 2 * hv, d, "attention", "column", False, module="in_proj_ba")
            + [
                Weight(
                    "ssm_conv1d.weight",
                    (self.conv_channels, 1, cfg.linear_conv_kernel),
                    "attention",
                    "column",
                ),
                Weight("ssm_dt.bias", (hv,), "attention", "column"),
                Weight("ssm_a", (hv,), "attention", "column"),
                Weight("ssm_norm.weight", (cfg.linear_value_head_dim,), "norms", "replicated"),
            ]
            + linear("ssm_out", d, self.value_width, "attention", "row", False, module="out_proj")
        )

    def projection_flops(self, tokens: int) -> dict[str, int]:
        d = self.cfg.d_model
        return {
            "attention_latent": 0,
            "attention_qkv": 2 * tokens * d * self.in_width,
            "attention_output": 2 * tokens * self.value_width * d,
        }

    def _dims(self, batch: int, seq_len: int) -> tuple[int, int, int, int]:
        """(batch x value heads, chunks, dk, dv)."""
        cfg = self.cfg
        return (
            batch * cfg.linear_value_heads,
            -(-seq_len // CHUNK_TOKENS),
            cfg.linear_key_head_dim,
            cfg.linear_value_head_dim,
        )

    def scan_flops(self, *, batch: int, seq_len: int) -> int:
        bh, n, dk, dv = self._dims(batch, seq_len)
        c = CHUNK_TOKENS
        conv = self.conv_flops(batch=batch, seq_len=seq_len)
        return conv + 2 * bh * n * c * (2 * c * dk + 3 * dk * dv + c * dv)

    def backward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        twice = super().backward_flops(batch=batch, seq_len=seq_len, causal=causal)
        bh, n, dk, dv = self._dims(batch, seq_len)
        c = CHUNK_TOKENS
        solves = 2 * bh * n * c * c * (dk + dv)
        ends = 2 * bh * c * dk * dv * 4
        return twice | {"mixer_scan": twice["mixer_scan"] + solves - ends}

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        """One token: the convolution over K inputs, and the state's read and update (2 Hv dk dv
        each: S k for the delta, S q for the output)."""
        cfg = self.cfg
        state = cfg.linear_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
        return 2 * self.conv_channels * cfg.linear_conv_kernel + 2 * 2 * state

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        h, hv = self.cfg.d_model, self.cfg.linear_value_heads
        return [
            Item("deltanet/norm_input", h, 0, residual_bytes, False),
            Item("deltanet/in_proj_input", h, 0, act_bytes, False),
            Item("deltanet/gate", self.value_width, 0, act_bytes, True),
            Item("deltanet/conv_input", self.conv_channels, 0, act_bytes, True),
            Item("deltanet/kernel_q_k_v", self.conv_channels, 0, act_bytes, True),
            Item("deltanet/beta", hv, 0, act_bytes, True),
            Item("deltanet/decay", 3 * hv, 0, FP32, True),
            Item("deltanet/wy_matrix", hv * CHUNK_TOKENS, 0, act_bytes, True),
            Item("deltanet/gated_norm_input", self.value_width, 0, act_bytes, True),
            Item("deltanet/out_proj_input", self.value_width, 0, act_bytes, True),
        ]

    def state(self) -> State:
        cfg = self.cfg
        heads, dk, dv = cfg.linear_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
        return State(
            self.conv_channels,
            cfg.linear_conv_kernel,
            heads * dk * dv,
            (
                f"gated DeltaNet: the convolution's inputs over {self.conv_channels} channels and a "
                f"recurrent state of {heads} heads x {dk} x {dv}",
            ),
        )

    def workspace_values(self, tp: int) -> int:
        return (self.in_width + self.conv_channels + self.value_width) // tp

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        if self.cfg.linear_key_heads % tp:
            return (
                f"{tp} must divide the gated DeltaNet key heads ({self.cfg.linear_key_heads}), which vLLM "
                "splits over ranks"
            )
        return None
