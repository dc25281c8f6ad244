"""Attention and a Mamba-2 block side by side on one norm's output, their outputs summed (Falcon-H1:
every layer runs both, layer_mixers "attention_mamba2"): one token mixer made of the two.

It answers the sum of its parts: both weight lists, both FLOP tallies (attention's core and Mamba-2's
scan), both saved-tensor lists with the shared norm's input kept once, attention's per-token cache
and Mamba-2's per-sequence state. The Falcon-H1 multipliers (attention_in/out, ssm_in/out, the muP
vector) are scalars and a buffer: no parameters, no matmul FLOPs.
"""

from dataclasses import dataclass

from app.accounting.blocks.base import Attention, CacheShape, Causal, Item, Recompute, State, Weight


def _summed(*parts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out


@dataclass(frozen=True)
class ParallelMixers(Attention):
    attention: Attention
    ssm: Attention

    @property
    def kind(self) -> str:
        return f"{self.attention.kind} beside {self.ssm.kind}"

    @property
    def window(self) -> int | None:  # type: ignore[override]
        return self.attention.window

    @property
    def fine_tune_refusal(self) -> str | None:  # type: ignore[override]
        return self.attention.fine_tune_refusal

    def weights(self) -> tuple[Weight, ...]:
        return self.attention.weights() + self.ssm.weights()

    def pairs_doubled(self, seq_len: int, causal: Causal) -> int:
        return self.attention.pairs_doubled(seq_len, causal)

    def projection_flops(self, tokens: int) -> dict[str, int]:
        return _summed(self.attention.projection_flops(tokens), self.ssm.projection_flops(tokens))

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        return self.attention.core_flops(pairs_doubled)

    def forward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        kw = dict(batch=batch, seq_len=seq_len, causal=causal)
        return _summed(self.attention.forward_flops(**kw), self.ssm.forward_flops(**kw))

    def backward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        kw = dict(batch=batch, seq_len=seq_len, causal=causal)
        return _summed(self.attention.backward_flops(**kw), self.ssm.backward_flops(**kw))

    def tokens_kept(self, context: int) -> int:
        return self.attention.tokens_kept(context)

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        return self.attention.decode_core_flops(keys, mla_cache) + self.ssm.decode_core_flops(0, mla_cache)

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        kw = dict(act_bytes=act_bytes, residual_bytes=residual_bytes, recompute=recompute, tp=tp)
        ssm = [i for i in self.ssm.saved(**kw) if not i.name.endswith(("/norm_input", "/in_proj_input"))]
        return self.attention.saved(**kw) + ssm  # one norm, its output read by both

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        return self.attention.cache(mla_cache=mla_cache, tp=tp)

    def state(self) -> State | None:
        return self.ssm.state()

    def workspace_values(self, tp: int) -> int:
        return self.attention.workspace_values(tp) + self.ssm.workspace_values(tp)

    def kv_replicas(self, tp: int) -> int:
        return self.attention.kv_replicas(tp)

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        return self.attention.tensor_parallel_refusal(tp) or self.ssm.tensor_parallel_refusal(tp)
