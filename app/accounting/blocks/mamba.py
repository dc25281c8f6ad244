"""Mamba-2's state-space block (Dao and Gu 2024, arXiv:2405.21060) as the token mixer of a layer:
Bamba, Nemotron-H and Falcon-H1 put it where attention would be (layer_mixers "mamba2").

With d = d_model, H heads of P channels (inner I = H x P), G groups of state N, kernel K:
  weights   in_proj (2I + 2GN + H, d): z, the convolution's input xBC (I + 2GN) and dt; conv1d taps
            (I + 2GN, 1, K) and its bias; dt_bias, A_log and D of H; the gated RMSNorm's weight (I)
            with ssm_norm; out_proj (d, I). in/out biases with ssm_proj_bias (out: ssm_out_bias)
  FLOPs     as FlopCounterMode counts transformers 5.23's torch_forward (the path without mamba_ssm's
            kernels): in_proj 2 t d (2I + 2GN + H), out_proj 2 t I d; the depthwise conv1d with
            padding K - 1, 2 B (S + K - 1)(I + 2GN) K; and the chunked scan's five einsums (each one
            bmm) over c = cdiv(S, Q) chunks of Q = ssm_chunk_size, the sequence zero-padded to c Q:
              C B^T        2 B c Q^2 H N        its weighted sum with x   2 B c Q^2 H P
              chunk states 2 B c Q H P N        passing states            2 B (c+1)^2 H P N
              C (states)   2 B c Q H P N
            elementwise work (softplus, exp, the segment sums) is not a matmul and is not counted.
            Backward is 2x forward: FlopCounterMode's count of conv1d's weight gradient ignores its
            groups (a dense (I + 2GN)^2 K convolution); Tally counts the depthwise one
  state     per sequence: the convolution's last inputs, (I + 2GN) x K in transformers' cache and
            (K - 1) x (I + 2GN) in vLLM's (MambaStateShapeCalculator.mamba2_state_shape), and the
            SSM state H x P x N, float32 in transformers (the scan's own dtype) and vLLM's
            mamba_ssm_cache_dtype (the model's by default; Nemotron-H's config asks float32)
  saved     mamba_ssm's fused training path (mamba_split_conv1d_scan_combined) keeps the block's
            input, in_proj's output (z, xBC, dt) and the gated norm's input, and out_proj its own
            input: the convolution and the scan are recomputed in backward
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Item, Recompute, State, Weight, linear
from app.accounting.blocks.state_mixer import StateMixer


@dataclass(frozen=True)
class Mamba2(StateMixer):
    kind: ClassVar[str] = "mamba2"
    label: ClassVar[str] = "Mamba-2"

    @property
    def inner(self) -> int:
        return self.cfg.ssm_heads * self.cfg.ssm_head_dim

    @property
    def conv_channels(self) -> int:
        return self.inner + 2 * self.cfg.ssm_groups * self.cfg.ssm_state_size

    @property
    def conv_kernel(self) -> int:
        return self.cfg.ssm_conv_kernel

    @property
    def in_width(self) -> int:
        return self.inner + self.conv_channels + self.cfg.ssm_heads

    def _weights(self) -> list[Weight]:
        cfg, d, heads = self.cfg, self.cfg.d_model, self.cfg.ssm_heads
        weights = linear(
            "ssm_in", self.in_width, d, "attention", "column", cfg.ssm_proj_bias, module="in_proj"
        )
        weights.append(
            Weight("ssm_conv1d.weight", (self.conv_channels, 1, cfg.ssm_conv_kernel), "attention", "column")
        )
        if cfg.ssm_conv_bias:
            weights.append(Weight("ssm_conv1d.bias", (self.conv_channels,), "attention", "column"))
        weights += [
            Weight("ssm_dt.bias", (heads,), "attention", "column"),
            Weight("ssm_a", (heads,), "attention", "column"),
            Weight("ssm_d", (heads,), "attention", "column"),
        ]
        if cfg.ssm_norm:
            weights.append(Weight("ssm_norm.weight", (self.inner,), "norms", "column"))
        out_bias = cfg.ssm_proj_bias if cfg.ssm_out_bias is None else cfg.ssm_out_bias
        return weights + linear(
            "ssm_out", d, self.inner, "attention", "row", out_bias, module="out_proj", bias_split="replicated"
        )

    def projection_flops(self, tokens: int) -> dict[str, int]:
        d = self.cfg.d_model
        return {
            "attention_latent": 0,
            "attention_qkv": 2 * tokens * d * self.in_width,
            "attention_output": 2 * tokens * self.inner * d,
        }

    def scan_flops(self, *, batch: int, seq_len: int) -> int:
        """The depthwise convolution and the chunked scan's five bmm, as the module docstring says."""
        cfg = self.cfg
        h, p, n, q = cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_state_size, cfg.ssm_chunk_size
        c = -(-seq_len // q)
        conv = self.conv_flops(batch=batch, seq_len=seq_len)
        scan = 2 * batch * h * (c * q * q * (n + p) + 2 * c * q * p * n + (c + 1) ** 2 * p * n)
        return conv + scan

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        """One token: the convolution over K inputs and the state update and read, 2 H P N each."""
        cfg = self.cfg
        return (
            2 * self.conv_channels * cfg.ssm_conv_kernel
            + 4 * cfg.ssm_heads * cfg.ssm_head_dim * cfg.ssm_state_size
        )

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        h = self.cfg.d_model
        return [
            Item("mamba/norm_input", h, 0, residual_bytes, False),
            Item("mamba/in_proj_input", h, 0, act_bytes, False),
            Item("mamba/in_proj_output", self.in_width, 0, act_bytes, True),
            Item("mamba/gated_norm_input", self.inner, 0, act_bytes, True),
            Item("mamba/out_proj_input", self.inner, 0, act_bytes, True),
        ]

    def state(self) -> State:
        cfg = self.cfg
        return State(
            self.conv_channels,
            cfg.ssm_conv_kernel,
            cfg.ssm_heads * cfg.ssm_head_dim * cfg.ssm_state_size,
            (
                f"Mamba-2: the convolution's inputs over {self.conv_channels} channels and an SSM state "
                f"of {cfg.ssm_heads} heads x {cfg.ssm_head_dim} x {cfg.ssm_state_size}",
            ),
        )

    def workspace_values(self, tp: int) -> int:
        return (self.in_width + self.conv_channels + self.inner) // tp

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        if self.cfg.ssm_heads % tp:
            return f"{tp} must divide the Mamba-2 heads ({self.cfg.ssm_heads}), which vLLM splits over ranks"
        return None
