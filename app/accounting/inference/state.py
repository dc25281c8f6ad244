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
                      and MambaStateDtypeCalculator); one state per layer per running sequence. Paged,
                      vLLM enlarges the attention block until one page holds a state and pads each
                      state to that page (vllm_hybrid_block; kv_cache.py counts the pages)
Tensor ranks split the channels and heads (vLLM shards both), so each keeps 1 / tensor_parallel.
"""

from typing import NamedTuple

from app.accounting import blocks
from app.accounting.transformer import TransformerConfig

RECURRENT_BYTES_TRANSFORMERS = 4  # float32


VLLM_KERNEL_BLOCK_ALIGNMENT_TOKENS = 16
"""FlashAttention's block multiple, to which vLLM rounds a hybrid's attention block
(HybridAttentionMambaModelConfig.verify_and_update_config, vllm/model_executor/models/config.py at
1936cf38)."""


class StateBytes(NamedTuple):
    layers: int
    """Layers keeping a state."""
    layer_bytes_per_gpu: int
    """The largest one layer's state on one rank: vLLM's mamba page before padding."""
    bytes_per_sequence: int
    """All those layers' state for one sequence, one copy."""
    bytes_per_sequence_per_gpu: int
    notes: tuple[str, ...]


def state_bytes(cfg: TransformerConfig, *, model_bytes: int, engine: str, tp: int) -> StateBytes:
    total = per_gpu = count = largest = 0
    notes: list[str] = []
    for layer, n in blocks.distinct(cfg):
        state = layer.attention.state()
        if state is None:
            continue
        if engine == "transformers":
            one = (
                state.conv_channels * state.conv_kernel * model_bytes
                + state.recurrent * RECURRENT_BYTES_TRANSFORMERS
            )
        else:
            one = (state.conv_channels * (state.conv_kernel - 1) + state.recurrent) * model_bytes
        count += n
        total += n * one
        per_gpu += n * -(-one // tp)
        largest = max(largest, -(-one // tp))
        notes += [f"{n} layers: {note}" for note in state.notes]
    if count:
        notes.append(
            "transformers keeps the convolution's last K inputs in the model's dtype and the recurrent "
            "state in float32"
            if engine == "transformers"
            else "vLLM keeps the convolution's last K - 1 inputs and the recurrent state in the model's "
            "dtype (mamba_cache_dtype and mamba_ssm_cache_dtype 'auto'), one state per sequence, constant in "
            "context; cache_dtype applies to attention layers only"
        )
    return StateBytes(count, largest, total, per_gpu, tuple(notes))


def vllm_hybrid_block(attention_bytes_per_token_gpu: int, state_page_gpu: int, block_size: int) -> int:
    """The attention block vLLM runs a hybrid with, without prefix caching: the least multiple of 16
    tokens whose page (one layer's block on one rank) holds a layer's state, or the asked block_size
    when that is larger; the state's page is then padded to the attention page, so every page in the
    pool is one size (HybridAttentionMambaModelConfig). Nemotron Nano 9B v2 in bf16 at tensor parallel
    1: a 2,695,168-byte state over 4,096 bytes a token is 658 tokens, rounded up to 672."""
    if not attention_bytes_per_token_gpu or not state_page_gpu:
        return block_size
    align = VLLM_KERNEL_BLOCK_ALIGNMENT_TOKENS
    return max(block_size, align * -(-state_page_gpu // (align * attention_bytes_per_token_gpu)))
