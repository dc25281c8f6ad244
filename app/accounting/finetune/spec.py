"""What a fine-tune trains, and where autograd's gradients flow as a consequence.

One walk over the layers decides, for each, whether its input requires a gradient, whether
its weights train whole, and which matrices carry adapters. FLOPs (flops.py) and saved tensors
(activations.py) both read it, so they cannot disagree about the graph.

Modes:
- full: every parameter trains (the training calculators' own case);
- freeze: the token embedding, the LM head and/or the first k layers frozen, the rest trained whole;
- lora: every base weight frozen; adapters on the target matrices (peft's LoRA), optionally the
  embedding and the head trained whole beside them (peft's modules_to_save);
- qlora: lora over a base whose matrices are stored quantized (bitsandbytes' NF4, NF4 with
  double quantization, or int8), dequantized to the compute dtype per matmul.
"""

from dataclasses import dataclass
from typing import Literal, NamedTuple

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.finetune.freeze import freeze_params
from app.accounting.finetune.lora import TARGETS, default_targets, wrapped
from app.accounting.transformer import TransformerConfig

Mode = Literal["full", "freeze", "lora", "qlora"]
MODES: tuple[Mode, ...] = ("full", "freeze", "lora", "qlora")
QLORA_FORMATS = ("nf4", "nf4_double_quant", "int8_channel")
"""Base formats bitsandbytes trains through (Linear4bit, Linear8bitLt), which peft wraps."""


@dataclass(frozen=True, slots=True)
class FineTune:
    mode: Mode = "full"
    rank: int = 16
    targets: tuple[str, ...] | None = None
    """lora, qlora: the wrapped matrices; None is peft's default for the family (lora.default_targets)."""
    train_embeddings: bool = False
    """lora/qlora: a trainable copy of the token embedding (peft's modules_to_save)."""
    train_head: bool = False
    """lora/qlora: a trainable copy of the LM head."""
    freeze_embeddings: bool = False
    freeze_head: bool = False
    freeze_layers: int = 0
    base_format: str = "nf4_double_quant"
    """qlora only: how the frozen base's matrices are stored (QLORA_FORMATS)."""

    @property
    def adapted(self) -> bool:
        return self.mode in ("lora", "qlora")


class LayerGrad(NamedTuple):
    """One transformer layer in the backward graph."""

    input_grad: bool
    """Its sublayers' input requires a gradient: the residual stream does, or the layer's own
    first norm has trained weights."""
    whole: bool
    """Every weight of the layer trains."""
    adapters: frozenset[str]
    """Targets wrapped by adapters in this layer (lora.TARGETS names, as lora.wrapped resolves them)."""
    parallel: bool
    """Attention and the MLP both read the layer's input, each through a norm (GPT-NeoX's
    use_parallel_residual, Falcon's parallel_attn): the MLP's input requires a gradient only where
    the layer's does, whatever attention's adapters make of its output. Sequential blocks feed the
    MLP x + attention(x), which requires one wherever attention's output does."""


class Graph(NamedTuple):
    layers: tuple[LayerGrad, ...]
    embedding_trains: bool
    head_trains: bool
    head_input_grad: bool
    """The final norm's output requires a gradient: the head's input gradient is computed."""


def check(cfg: TransformerConfig, spec: FineTune) -> None:
    """Refuses what the mode cannot mean for this model, naming the field."""
    if spec.mode not in MODES:
        raise InvalidInput("mode", f"must be one of {', '.join(MODES)}, got {spec.mode!r}")
    if spec.mode == "qlora" and spec.base_format not in QLORA_FORMATS:
        raise InvalidInput("base_format",
                           f"QLoRA trains over bitsandbytes' {', '.join(QLORA_FORMATS)}; "
                           f"{spec.base_format!r} has no LoRA backward there (a float base trains "
                           "with mode lora)")
    if spec.mode != "freeze" and (spec.freeze_embeddings or spec.freeze_head or spec.freeze_layers):
        raise InvalidInput("mode", "freeze_embeddings, freeze_head and freeze_layers need mode "
                                            "freeze (lora and qlora freeze the whole base)")
    if not spec.adapted and (spec.train_embeddings or spec.train_head):
        raise InvalidInput("mode", "train_embeddings and train_head go with mode lora or qlora")
    why = blocks.fine_tune_refusal(cfg)
    if spec.mode != "full" and why:
        raise InvalidInput("model", why)
    if spec.mode == "freeze":  # the layer count, and a tied head frozen apart from its embedding
        freeze_params(cfg, freeze_embeddings=spec.freeze_embeddings, freeze_head=spec.freeze_head,
                      freeze_layers=spec.freeze_layers)


def targets_of(cfg: TransformerConfig, spec: FineTune) -> tuple[str, ...]:
    return default_targets(cfg) if spec.targets is None else spec.targets


def graph(cfg: TransformerConfig, spec: FineTune) -> Graph:
    full = spec.mode == "full"
    adapters = frozenset(wrapped(cfg, targets_of(cfg, spec))) if spec.adapted else frozenset()
    embedding = full or (spec.mode == "freeze" and not spec.freeze_embeddings) or spec.train_embeddings
    head = full or (spec.mode == "freeze" and not spec.freeze_head) or spec.train_head
    if cfg.tied_embeddings and spec.mode == "freeze":
        head = embedding = embedding and head
    # A trained layer's own norm weights make its sublayers' inputs require gradients, whatever
    # the residual does, when a norm with weights stands before attention.
    affine_first = cfg.norm != "layernorm_no_affine" and cfg.norm_layout != "post"
    parallel = cfg.norm_layout in ("parallel", "parallel_shared")
    grad, layers = embedding, []
    for i in range(cfg.n_layers):
        whole = full or (spec.mode == "freeze" and i >= spec.freeze_layers)
        layers.append(LayerGrad(grad or (whole and affine_first), whole, adapters, parallel))
        grad = grad or whole or bool(adapters & _present(cfg, i))
    # The final norm trains in full and freeze modes, so the head's input always requires a gradient.
    return Graph(tuple(layers), embedding, head, grad or not spec.adapted)


def _present(cfg: TransformerConfig, layer: int) -> frozenset[str]:
    """Targets this layer has: its blocks' nn.Linear modules peft can name, and a mixture-of-experts
    layer's 3-D expert parameters (its MLP targets are its shared experts')."""
    return frozenset(m.module for m in blocks.layers(cfg)[layer].linears()) & frozenset(TARGETS)
