"""What the token mixers that are not softmax attention share (Mamba-1, Mamba-2, gated DeltaNet):
a causal convolution and a recurrent scan whose state is constant in context.

Their forward FLOPs are the projections plus the scan (`mixer_scan`: the convolution and the
scan's matmuls, each kind's scan_flops), no attention core; they keep no per-token cache, so a
layer keeps no tokens of the context; inference/state.py sizes the per-sequence state they keep
instead (state()).
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import Attention, CacheShape, Causal


@dataclass(frozen=True)
class StateMixer(Attention):
    label: ClassVar[str] = ""
    """The kind as prose: "Mamba-2", "gated DeltaNet"."""
    window: ClassVar[None] = None
    mixes_by_attention: ClassVar[bool] = False

    def conv_flops(self, *, batch: int, seq_len: int) -> int:
        """The depthwise conv1d over each kind's conv_channels, width conv_kernel K, padding K - 1:
        2 B (S + K - 1) channels K, as FlopCounterMode counts it forward, and as much again for its
        (depthwise) weight gradient in backward."""
        k = self.conv_kernel  # type: ignore[attr-defined]
        return 2 * batch * (seq_len + k - 1) * self.conv_channels * k  # type: ignore[attr-defined]

    def scan_flops(self, *, batch: int, seq_len: int) -> int:
        """The depthwise convolution and the scan's matmuls over batch x seq_len tokens."""
        raise NotImplementedError

    def forward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        return (self.projection_flops(batch * seq_len) | self.core_flops(0)
                | {"mixer_scan": self.scan_flops(batch=batch, seq_len=seq_len)})

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        return {"attention_scores": 0, "attention_values": 0}  # no softmax attention: mixer_scan instead

    def tokens_kept(self, context: int) -> int:
        return 0

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        return CacheShape("kv", 0, 0, 0, 0, (f"a {self.label} layer keeps no per-token cache",))
