"""The two-matrix MLP (GPT-2, GPT-NeoX, Falcon, StarCoder2): up (width, d), an activation (GELU),
down (d, width).

Per layer, with d = d_model and w = d_ff:
  weights   up (w, d) split by columns over tensor ranks, down (d, w) by rows; with mlp_bias their
            biases (w,) and (d,), the latter replicated (added after the all-reduce)
  FLOPs     2 t d w per matrix: 4 t d w
  saved     the norm's input (residual width), up's input, the activation's input and output

A mixture of experts builds its experts and shared experts from the same kind (experts.py).
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Component, Item, Mlp, Weight, linear


@dataclass(frozen=True)
class DenseMlp(Mlp):
    width: int
    suffix: str = ""
    """GGUF's name suffix: "" for a layer's MLP, "_shexp" for shared experts."""
    component: Component = "mlp"
    bias: bool = False

    kind: ClassVar[str] = "dense"
    matrices: ClassVar[int] = 2
    hidden_names: ClassVar[tuple[str, ...]] = ("activation_input", "down_input")
    live_hiddens: ClassVar[int] = 2
    """Hidden tensors a serving forward holds at once: up's output and the activation's."""

    def _weights(self) -> list[Weight]:
        return self._up() + linear(f"ffn_down{self.suffix}", self.cfg.d_model, self.width, self.component,
                                   "row", self.bias, module="down", bias_split="replicated")

    def _up(self) -> list[Weight]:
        d, w = self.cfg.d_model, self.width
        return linear(f"ffn_up{self.suffix}", w, d, self.component, "column", self.bias, module="up")

    def forward_flops(self, tokens: int) -> dict[str, int]:
        return {"mlp": 2 * tokens * self.cfg.d_model * self.width * self.matrices}

    def workspace_bytes(self, *, tokens: int, act_bytes: int, tp: int) -> int:
        return tokens * self.live_hiddens * self.width // tp * act_bytes

    def hidden(self, prefix: str, width: int, act_bytes: int) -> list[Item]:
        """The hidden tensors backward keeps at `width` per token (split by tensor ranks)."""
        return [Item(f"{prefix}{name}", width, 0, act_bytes, True) for name in self.hidden_names]

    def saved(self, *, act_bytes: int, residual_bytes: int) -> list[Item]:
        h = self.cfg.d_model
        items = [Item("mlp/norm_input", h, 0, residual_bytes, False),
                 Item("mlp/up_input", h, 0, act_bytes, False), *self.hidden("mlp/", self.width, act_bytes)]
        if self.cfg.dropout:
            items.append(Item("mlp/dropout_mask", h, 0, 1, False))
        return items
