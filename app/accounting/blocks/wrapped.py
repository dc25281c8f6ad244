"""An attention kind that changes which (query, key) pairs another one scores and which tokens it
keeps, and nothing else (blocks/windowed.py, blocks/chunked.py): weights, projections, the core's
FLOPs per pair, saved tensors, per-token cache and tensor-parallel split are the wrapped kind's.
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Attention, CacheShape, Item, Recompute, Weight


@dataclass(frozen=True)
class Wrapped(Attention):
    inner: Attention
    prefix: ClassVar[str] = ""

    @property
    def kind(self) -> str:
        return f"{self.prefix} {self.inner.kind}"

    @property
    def fine_tune_refusal(self) -> str | None:  # type: ignore[override]
        return self.inner.fine_tune_refusal

    def weights(self) -> tuple[Weight, ...]:
        return self.inner.weights()

    def projection_flops(self, tokens: int) -> dict[str, int]:
        return self.inner.projection_flops(tokens)

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        return self.inner.core_flops(pairs_doubled)

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        return self.inner.decode_core_flops(keys, mla_cache)

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        return self.inner.saved(act_bytes=act_bytes, residual_bytes=residual_bytes, recompute=recompute,
                                tp=tp)

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        return self.inner.cache(mla_cache=mla_cache, tp=tp)

    def workspace_values(self, tp: int) -> int:
        return self.inner.workspace_values(tp)

    def kv_replicas(self, tp: int) -> int:
        return self.inner.kv_replicas(tp)

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        return self.inner.tensor_parallel_refusal(tp)
