"""The gated, three-matrix MLP (LLaMA's SwiGLU, Gemma's GeGLU, Shazeer 2020): act(x W_gate) * (x W_up),
then W_down.

Per layer, with d = d_model and w = d_ff (LLaMA's rule by default: 8 d / 3 rounded up to 256):
  weights   gate and up (w, d) split by columns, down (d, w) by rows; one gate_up module where the
            family fuses them (Phi-3's gate_up_proj: the same weights and FLOPs)
  FLOPs     2 t d w per matrix: 6 t d w
  saved     the norm's input, up's input, the gate's and up's outputs, the activation's output
            (SiLU or GELU) and the down projection's input
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Weight, linear
from app.accounting.blocks.dense import DenseMlp
from app.accounting.transformer import TransformerConfig


@dataclass(frozen=True)
class GatedMlp(DenseMlp):
    kind: ClassVar[str] = "gated"
    matrices: ClassVar[int] = 3
    live_hiddens: ClassVar[int] = 3  # gate's and up's outputs, and act(gate) * up

    @property
    def hidden_names(self) -> tuple[str, ...]:  # type: ignore[override]
        act = "silu" if self.cfg.mlp == "swiglu" else "gelu"
        return ("gate_output", "up_output", f"{act}_output", "down_input")

    def _up(self) -> list[Weight]:
        d, w, c, bias = self.cfg.d_model, self.width, self.component, self.bias
        gate, up = ("gate_up", "gate_up") if self.cfg.fused_gate_up else ("gate", "up")
        return (linear(f"ffn_gate{self.suffix}", w, d, c, "column", bias, module=gate)
                + linear(f"ffn_up{self.suffix}", w, d, c, "column", bias, module=up))


def mlp_kind(cfg: TransformerConfig) -> type[DenseMlp]:
    """The MLP kind of the model's dense layers, experts and shared experts: gated (three matrices)
    for swiglu and geglu, two matrices for gelu."""
    return GatedMlp if cfg.gated else DenseMlp
