"""The state and cache bytes of the hybrid families against what transformers 5.23 holds after real
forwards: tiny random models on the CPU, a prompt then decode steps; the DynamicCache's
LinearAttentionLayers (conv_states and recurrent_states) and DynamicLayers (keys and values) summed
layer by layer, against kv_cache(engine="transformers")."""

import pytest
import torch

from app.accounting.hf import import_config
from app.accounting.inference.kv_cache import kv_cache
from tests.support.hf_configs_hybrid import SMALL
from tests.support.hf_generate import BATCH, DTYPES, generate


def tensors(states) -> list[torch.Tensor]:
    values = states.values() if isinstance(states, dict) else states
    return [t for t in values if isinstance(t, torch.Tensor)]


def held(raw: dict, dtype: str, prompt: int, steps: int) -> tuple[int, int, set]:
    """(bytes of the linear layers' state, bytes of the attention layers' K and V, the state dtypes)."""
    state, kv, dtypes = 0, 0, set()
    for layer in generate(raw, dtype, prompt, steps).layers:
        if hasattr(layer, "recurrent_states"):
            found = tensors(layer.conv_states) + tensors(layer.recurrent_states)
            state += sum(t.nbytes for t in found)
            dtypes |= {
                (name, t.dtype)
                for name, ts in (
                    ("conv", tensors(layer.conv_states)),
                    ("recurrent", tensors(layer.recurrent_states)),
                )
                for t in ts
            }
        # Falcon-H1's layers hold both; Nemotron-H's MLP and expert layers an empty one.
        if getattr(layer, "keys", None) is not None:
            kv += layer.keys.nbytes + layer.values.nbytes
    return state, kv, dtypes


@pytest.mark.parametrize("family", list(SMALL))
@pytest.mark.parametrize(
    ("dtype", "prompt", "steps"), [("float32", 9, 1), ("bfloat16", 3, 2), ("bfloat16", 40, 3)]
)
def test_state_and_cache_are_what_transformers_holds(family, dtype, prompt, steps):
    raw = SMALL[family]
    cfg = import_config(raw).config
    ours = kv_cache(
        cfg, context=prompt + steps, batch=BATCH, model_dtype=dtype, block_size=None, engine="transformers"
    )
    state, kv, dtypes = held(raw, dtype, prompt, steps)
    assert state == BATCH * ours.state_bytes_per_sequence
    assert kv + state == ours.total_bytes
    # The recurrent state stays float32 in a bfloat16 model; the convolution's inputs take its dtype.
    assert dtypes == {("conv", DTYPES[dtype]), ("recurrent", torch.float32)}
    # Constant in context: the same state at a longer context.
    longer = kv_cache(
        cfg,
        context=prompt + steps + 100,
        batch=BATCH,
        model_dtype=dtype,
        block_size=None,
        engine="transformers",
    )
    assert longer.state_bytes_per_sequence == ours.state_bytes_per_sequence


def test_vllm_keeps_k_minus_1_inputs_and_the_state_in_the_models_dtype():
    # Bamba-like small model: Mamba-2 channels 128 + 2 x 2 x 8 = 160, K 4, state 8 x 16 x 8 = 1024 values.
    cfg = import_config(SMALL["bamba"]).config
    vllm = kv_cache(cfg, context=8, model_dtype="bfloat16", block_size=None)
    hf = kv_cache(cfg, context=8, model_dtype="bfloat16", block_size=None, engine="transformers")
    assert vllm.state_layers == hf.state_layers == 2
    assert vllm.state_bytes_per_sequence == 2 * (160 * 3 + 1024) * 2
    assert hf.state_bytes_per_sequence == 2 * (160 * 4 * 2 + 1024 * 4)
