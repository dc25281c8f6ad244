"""Mamba's selective state-space block (Gu and Dao 2023, arXiv:2312.00752), Mamba-1, as a layer's
token mixer: Jamba's mamba layers (layer_mixers "mamba").

With d = d_model, inner width I (ssm_inner: Jamba's mamba_expand x hidden_size), state N, dt rank R
and kernel K:
  weights   in_proj (2I, d): x and the gate z; conv1d taps (I, 1, K) and its bias; x_proj (R + 2N, I)
            giving dt, B and C; dt_proj (I, R) with its bias; A_log (I, N); D (I); out_proj (d, I);
            with ssm_dt_bc_norms (Jamba) RMSNorm weights on dt (R), B (N) and C (N). in/out biases
            with ssm_proj_bias
  FLOPs     as FlopCounterMode counts transformers 5.23's sequential scan (the path without the
            mamba_ssm kernels): in_proj 2 t d 2I, x_proj 2 t I (R + 2N), dt_proj 2 t R I, out_proj
            2 t I d; the depthwise conv1d with padding K - 1, 2 B (S + K - 1) I K; and one bmm per
            step reading C out of the state, 2 t I N (the state's update is elementwise, not
            counted). Backward is 2x forward (FlopCounterMode counts conv1d's weight gradient as a
            dense I^2 K convolution; Tally counts the depthwise one)
  saved     mamba_ssm's fused training path (MambaInnerFn, checkpoint_lvl 1; mamba_ssm/ops/
            selective_scan_interface.py at e9594ce) keeps in_proj's output xz (2I), x_proj's output
            (R + 2N), B and C as contiguous copies (normed with ssm_dt_bc_norms, 2N) and the scan's
            output (I); the convolution and delta are recomputed, out_proj runs inside it. x_proj's
            output, B and C are not split by tensor ranks (x_proj is row-parallel: its output is
            whole on every rank)
  state     per sequence: the convolution's last inputs, I x K in transformers' cache and (K - 1) x I
            in vLLM's (MambaStateShapeCalculator.mamba1_state_shape), and the SSM state I x N,
            float32 in transformers
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Item, Recompute, State, Weight, linear
from app.accounting.blocks.state_mixer import StateMixer


@dataclass(frozen=True)
class Mamba1(StateMixer):
    kind: ClassVar[str] = "mamba"
    label: ClassVar[str] = "Mamba"

    @property
    def conv_channels(self) -> int:
        return self.cfg.ssm_inner

    @property
    def conv_kernel(self) -> int:
        return self.cfg.ssm_conv_kernel

    def _weights(self) -> list[Weight]:
        cfg, d, i = self.cfg, self.cfg.d_model, self.cfg.ssm_inner
        n, r = cfg.ssm_state_size, cfg.ssm_dt_rank
        weights = linear("ssm_in", 2 * i, d, "attention", "column", cfg.ssm_proj_bias, module="in_proj")
        weights.append(Weight("ssm_conv1d.weight", (i, 1, cfg.ssm_conv_kernel), "attention", "column"))
        if cfg.ssm_conv_bias:
            weights.append(Weight("ssm_conv1d.bias", (i,), "attention", "column"))
        weights += (
            linear("ssm_x", r + 2 * n, i, "attention", "row", False, module="x_proj")
            + linear("ssm_dt", i, r, "attention", "column", True, module="dt_proj")
            + [Weight("ssm_a", (i, n), "attention", "column"), Weight("ssm_d", (i,), "attention", "column")]
        )
        if cfg.ssm_dt_bc_norms:
            weights += [
                Weight("ssm_dt_norm.weight", (r,), "norms", "replicated"),
                Weight("ssm_b_norm.weight", (n,), "norms", "replicated"),
                Weight("ssm_c_norm.weight", (n,), "norms", "replicated"),
            ]
        return weights + linear(
            "ssm_out", d, i, "attention", "row", cfg.ssm_proj_bias, module="out_proj", bias_split="replicated"
        )

    def projection_flops(self, tokens: int) -> dict[str, int]:
        cfg, d, i = self.cfg, self.cfg.d_model, self.cfg.ssm_inner
        r, n = cfg.ssm_dt_rank, cfg.ssm_state_size
        return {
            "attention_latent": 0,
            "attention_qkv": 2 * tokens * (d * 2 * i + i * (r + 2 * n) + r * i),
            "attention_output": 2 * tokens * i * d,
        }

    def scan_flops(self, *, batch: int, seq_len: int) -> int:
        cfg = self.cfg
        conv = self.conv_flops(batch=batch, seq_len=seq_len)
        return conv + 2 * batch * seq_len * cfg.ssm_inner * cfg.ssm_state_size

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        """One token: the convolution over K inputs, the state's update and its read, 2 I N each."""
        cfg = self.cfg
        return 2 * cfg.ssm_inner * cfg.ssm_conv_kernel + 4 * cfg.ssm_inner * cfg.ssm_state_size

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        cfg, h, i = self.cfg, self.cfg.d_model, self.cfg.ssm_inner
        n = cfg.ssm_state_size
        return [
            Item("mamba/norm_input", h, 0, residual_bytes, False),
            Item("mamba/in_proj_input", h, 0, act_bytes, False),
            Item("mamba/in_proj_output", 2 * i, 0, act_bytes, True),
            Item("mamba/x_proj_output", cfg.ssm_dt_rank + 2 * n, 0, act_bytes, False),
            Item("mamba/b_and_c", 2 * n, 0, act_bytes, False),
            Item("mamba/scan_output", i, 0, act_bytes, True),
        ]

    def state(self) -> State:
        cfg = self.cfg
        return State(
            cfg.ssm_inner,
            cfg.ssm_conv_kernel,
            cfg.ssm_inner * cfg.ssm_state_size,
            (
                f"Mamba: the convolution's inputs over {cfg.ssm_inner} channels and an SSM state of "
                f"{cfg.ssm_inner} x {cfg.ssm_state_size}",
            ),
        )

    def workspace_values(self, tp: int) -> int:
        return (2 * self.cfg.ssm_inner + 2 * self.cfg.ssm_inner) // tp

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        if self.cfg.ssm_inner % tp:
            return (
                f"{tp} must divide the Mamba inner width ({self.cfg.ssm_inner}), which vLLM splits over ranks"
            )
        return None
