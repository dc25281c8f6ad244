"""Norm layouts and q/k norms, measured: the train_step probe builds pre, post, sandwich,
parallel and shared-norm blocks and Qwen3/OLMo 2 q/k norms; per layer the bytes autograd
saves match the itemized prediction, and the step's peak is predicted within 10%."""

import pytest
import torch

from app.accounting.models import TransformerConfig
from app.bench import train_step
from app.bench.models import Transformer
from tests.support.train_step import LLAMA, QUICK, TRAINING, quiet, saved_bytes_per_layer

CONFIGS = {
    "post (OLMo 2)": LLAMA | {"norm_layout": "post", "qk_norm": "projection"},
    "sandwich (Gemma 2)": LLAMA | {"norm_layout": "sandwich", "mlp": "geglu", "tied_embeddings": True},
    "sandwich + head q/k norms (Gemma 3)": LLAMA | {"norm_layout": "sandwich", "qk_norm": "head",
                                                    "n_kv_heads": 2, "head_dim": 32},
    "parallel (GPT-NeoX)": {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "position": "rope",
                            "norm_layout": "parallel", "attn_bias": True},
    "parallel_shared (Falcon-7B)": {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4,
                                    "n_kv_heads": 1, "position": "rope", "norm_layout": "parallel_shared",
                                    "attn_bias": False, "mlp_bias": False},
    "no-affine LayerNorm (OLMo)": LLAMA | {"norm": "layernorm_no_affine"},
    "moe + sandwich": LLAMA | {"norm_layout": "sandwich", "n_experts": 4, "top_k": 2, "d_ff_expert": 48},
}
NAMES = list(CONFIGS)


@pytest.mark.parametrize("name", NAMES)
def test_probe_parameters_are_the_engines(api, name):
    counted = api.ok("/api/v1/flops/transformer", {"model": CONFIGS[name], "batch_size": 1,
                                                   "seq_len": 16})["params"]["total"]
    model = Transformer(TransformerConfig(**CONFIGS[name]))
    assert sum(p.numel() for p in model.parameters()) == counted


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_each_layer_saves_what_the_items_say(api, name, precision, dtype):
    """Within 3.5%, never above: the items leave out each norm's fp32 statistics (rstd, and
    LayerNorm's mean: one or two floats per token per norm, and per head for q/k norms) and
    attention's log-sum-exp, which weigh most in 16-bit layers with many norms."""
    body = api.ok(TRAINING, {"model": CONFIGS[name], "batch_size": 4, "seq_len": 128, "precision": precision,
                             "recompute": "selective"})
    detail = body["activation_detail"]
    measured = saved_bytes_per_layer(TransformerConfig(**CONFIGS[name]), 4, 128, dtype)
    for i in range(len(measured)):
        assert detail["per_layer_total"] == pytest.approx(measured[i], rel=0.035), i
        assert detail["per_layer_total"] <= measured[i]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision,optimizer", [("fp32", "adamw"), ("bf16_autocast", "adamw")])
def test_train_step_predicts_peak_memory_within_10_percent(name, precision, optimizer):
    result = train_step.run(QUICK | {"model": CONFIGS[name], "batch_size": 4, "seq_len": 128,
                                     "optimizer": optimizer, "precision": precision, "steps": 1,
                                     "warmup_steps": 1}, quiet)
    mem = result["memory"]
    assert abs(mem["relative_error"]) < 0.10, mem
