"""A layer without one of its two sublayers (Nemotron-H: each of its layers is one norm and one block,
a Mamba-2 mixer, attention, an MLP or experts): the missing sublayer has no weights, FLOPs, saved
tensors, cache or state, and the layer has no norm before it (blocks/__init__.py keeps only the
present sublayers' norms). layer_mixers "none" leaves out the token mixer; mlp_free_layers the MLP.
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Attention, CacheShape, Causal, Item, Mlp, Recompute, Weight


@dataclass(frozen=True)
class NoMixer(Attention):
    kind: ClassVar[str] = "none"
    window: ClassVar[None] = None
    mixes_by_attention: ClassVar[bool] = False
    present: ClassVar[bool] = False

    def _weights(self) -> list[Weight]:
        return []

    def projection_flops(self, tokens: int) -> dict[str, int]:
        return {"attention_latent": 0, "attention_qkv": 0, "attention_output": 0}

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        return {"attention_scores": 0, "attention_values": 0}

    def forward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        return self.projection_flops(0) | self.core_flops(0)

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        return 0

    def tokens_kept(self, context: int) -> int:
        return 0

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        return []

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        return CacheShape("kv", 0, 0, 0, 0, ("a layer without a token mixer keeps no cache",))

    def workspace_values(self, tp: int) -> int:
        return 0


@dataclass(frozen=True)
class NoMlp(Mlp):
    kind: ClassVar[str] = "none"
    present: ClassVar[bool] = False

    def _weights(self) -> list[Weight]:
        return []

    def forward_flops(self, tokens: int) -> dict[str, int]:
        return {"mlp": 0}

    def saved(self, *, act_bytes: int, residual_bytes: int) -> list[Item]:
        return []

    def workspace_bytes(self, *, tokens: int, act_bytes: int, tp: int) -> int:
        return 0
