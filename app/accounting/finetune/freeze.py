"""Partial fine-tuning: chosen parts frozen, the rest trained whole.

Parts are the token (and learned position) embeddings, the LM head, and the first k
transformer layers. A tied head is the embedding matrix itself: it trains unless both are
frozen, and freezing one of them alone is refused, naming the field (the tensor cannot be
both). The final norm trains with the last layer's side of the model.
"""

from dataclasses import dataclass

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.params import count_params, layer_params
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig


@dataclass(slots=True)
class FrozenCount:
    trainable_params: int
    frozen_params: int
    total_params: int
    frozen_parts: list[str]
    """What was frozen: embeddings, lm_head, layers 0..k-1."""

    __pydantic_config__ = RECORD


def freeze_params(cfg: TransformerConfig, *, freeze_embeddings: bool = False,
                  freeze_head: bool = False, freeze_layers: int = 0) -> FrozenCount:
    if not 0 <= freeze_layers <= cfg.n_layers:
        raise InvalidInput("freeze_layers", f"must be between 0 and the model's {cfg.n_layers} layers, "
                                            f"got {freeze_layers}")
    if cfg.tied_embeddings and freeze_embeddings != freeze_head:
        field = "freeze_head" if freeze_embeddings else "freeze_embeddings"
        raise InvalidInput(field, "the LM head is the embedding matrix (tied embeddings): freeze both or "
                                  "neither")
    count = count_params(cfg)
    token = cfg.vocab_size * cfg.d_model
    position = cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0
    frozen, parts = 0, []
    if freeze_embeddings:
        frozen += token + position
        parts.append("embeddings")
    if freeze_head and not cfg.tied_embeddings:
        frozen += token
    if freeze_head:
        parts.append("lm_head")
    if freeze_layers:
        frozen += sum(layer_params(layer).total for layer in blocks.layers(cfg)[:freeze_layers])
        parts.append(f"layers 0..{freeze_layers - 1}")
    return FrozenCount(trainable_params=count.total - frozen, frozen_params=frozen,
                       total_params=count.total, frozen_parts=parts)
