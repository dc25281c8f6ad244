"""The constant-size state a sequence keeps in state-space and linear-attention layers (Mamba-2,
gated DeltaNet): unlike the KV cache it does not grow with context.

Per layer per sequence (blocks/mamba.py and deltanet.py give the channels and the state):
  transformers 5.23   conv_states of (channels, K) in the model's dtype and recurrent_states in
                      float32 whatever the model's dtype (the torch scans compute in float32 and
                      the cache keeps their final state): its LinearAttentionLayer, measured after
                      real forwards in tests/oracles/test_state_hf.py
  vLLM                conv (K - 1, channels) and the temporal state, both in the model's dtype
                      unless mamba_ssm_cache_dtype says otherwise ('auto';
                      vllm/model_executor/layers/mamba/mamba_utils.py, MambaStateShapeCalculator
                      and MambaStateDtypeCalculator); one state per layer per running sequence (its
                      page is padded to the attention layers' page size, which is not counted here)
Tensor ranks split the channels and heads (vLLM shards both), so each keeps 1 / tensor_parallel.
"""

from typing import NamedTuple

from app.accounting import blocks
from app.accounting.transformer import TransformerConfig

RECURRENT_BYTES_TRANSFORMERS = 4  # float32


class StateBytes(NamedTuple):
    layers: int
    """Layers keeping a state."""
    bytes_per_sequence: int
    """All those layers' state for one sequence, one copy."""
    bytes_per_sequence_per_gpu: int
    notes: tuple[str, ...]


def state_bytes(cfg: TransformerConfig, *, model_bytes: int, engine: str, tp: int) -> StateBytes:
    total = per_gpu = count = 0
    notes: list[str] = []
    for layer, n in blocks.distinct(cfg):
        state = layer.attention.state()
        if state is None:
            continue
        if engine == "transformers":
            one = state.conv_channels * state.conv_kernel * model_bytes + state.recurrent * RECURRENT_BYTES_TRANSFORMERS
        else:
            one = (state.conv_channels * (state.conv_kernel - 1) + state.recurrent) * model_bytes
        count += n
        total += n * one
        per_gpu += n * -(-one // tp)
        notes += [f"{n} layers: {note}" for note in state.notes]
    if count:
        notes.append("transformers keeps the convolution's last K inputs in the model's dtype and the recurrent "
                     "state in float32" if engine == "transformers" else
                     "vLLM keeps the convolution's last K - 1 inputs and the recurrent state in the model's dtype "
                     "(mamba_cache_dtype and mamba_ssm_cache_dtype 'auto'), one state per sequence, constant in "
                     "context; cache_dtype applies to attention layers only")
    return StateBytes(count, total, per_gpu, tuple(notes))
