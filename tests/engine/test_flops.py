"""FLOP counts against the course's formulas and torch's FlopCounterMode."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.support.api import assert_names_field
from tests.support.reference import lm_from_config


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_course_linear_model_is_2bdk(api):
    B, D, K = 1024, 256, 64  # the lecture's x @ w
    body = api.ok("/api/v1/flops/matmul", {"m": B, "k": D, "n": K})
    x, w = torch.ones(B, D, device="meta"), torch.randn(D, K, device="meta")
    assert body["flops"] == 2 * B * D * K == counted(lambda: x @ w)
    assert body["macs"] == B * D * K
    assert body["flops_without_fma"] == B * K * (2 * D - 1)


def test_batched_matmul_and_intensity(api):
    body = api.ok("/api/v1/flops/matmul", {"m": 64, "k": 32, "n": 16, "batch": 3, "dtype": "bf16"})
    a, b = torch.empty(3, 64, 32, device="meta"), torch.empty(3, 32, 16, device="meta")
    assert body["flops"] == counted(lambda: a @ b)
    assert body["bytes"] == 2 * 3 * (64 * 32 + 32 * 16 + 64 * 16)
    assert body["arithmetic_intensity"] == body["flops"] / body["bytes"]


@pytest.mark.parametrize("input_requires_grad", [False, True])
def test_mlp_forward_and_backward_match_flop_counter(api, input_requires_grad):
    batch, dims = 128, [256, 512, 512, 64]
    body = api.ok("/api/v1/flops/mlp", {"batch": batch, "dims": dims,
                                        "input_requires_grad": input_requires_grad})
    x = torch.randn(batch, dims[0], device="meta", requires_grad=input_requires_grad)
    ws = [torch.randn(a, b, device="meta", requires_grad=True) for a, b in zip(dims, dims[1:], strict=False)]
    out = {}

    def forward():
        h = x
        for w in ws:
            h = h @ w
        out["loss"] = h.sum()

    assert body["forward"] == counted(forward)
    assert body["backward"] == counted(lambda: out["loss"].backward())
    params = sum(a * b for a, b in zip(dims, dims[1:], strict=False))
    assert body["params"] == params
    assert (body["approx_forward"], body["approx_backward"], body["approx_total"]) == (
        2 * batch * params, 4 * batch * params, 6 * batch * params)
    # The course's rule: backward is 4 x tokens x params once every input gradient is needed.
    assert (body["backward"] == body["approx_backward"]) == input_requires_grad


CONFIGS = {
    "gpt2-style": dict(n_layers=2, d_model=64, n_heads=4, vocab_size=97, max_seq_len=32),
    "llama-style": dict(n_layers=3, d_model=64, n_heads=8, n_kv_heads=2, d_ff=176, vocab_size=101,
                        mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                        position="rope", max_seq_len=64),
    "qwen-style": dict(n_layers=2, d_model=48, n_heads=6, n_kv_heads=3, d_ff=96, vocab_size=50,
                       mlp="swiglu", norm="rmsnorm", bias=False, qkv_bias=True,
                       tied_embeddings=True, position="rope"),
    "wide-heads": dict(n_layers=1, d_model=32, n_heads=4, head_dim=16, vocab_size=40, mlp="gelu"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformer_matches_flop_counter_forward_and_backward(api, name):
    cfg, batch, seq = CONFIGS[name], 2, 16
    body = api.ok("/api/v1/flops/transformer",
                  {"model": cfg, "batch_size": batch, "seq_len": seq, "causal": "full"})
    model = lm_from_config(body["model"])
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq), device="meta")
    out = {}
    forward = counted(lambda: out.setdefault("logits", model(ids)))
    backward = counted(lambda: out["logits"].sum().backward())
    assert body["forward"]["total"] == forward
    assert body["backward"]["total"] == backward
    assert body["step"]["total"] == forward + backward


def test_breakdown_sums_and_causal_halving(api):
    full = api.ok("/api/v1/flops/transformer", {"model": "gpt2", "batch_size": 4, "seq_len": 1024})
    half = api.ok("/api/v1/flops/transformer",
                  {"model": "gpt2", "batch_size": 4, "seq_len": 1024, "causal": "halved"})
    parts = [k for k in full["forward"] if k != "total"]
    assert sum(full["forward"][k] for k in parts) == full["forward"]["total"]
    for k in ("attention_scores", "attention_values"):
        assert half["forward"][k] * 2 == full["forward"][k]
    for k in ("attention_qkv", "attention_output", "mlp", "lm_head"):
        assert half["forward"][k] == full["forward"][k]
    tokens = 4 * 1024
    assert full["six_n_d"] == 6 * 124_439_808 * tokens
    assert full["ratio_to_six_n_d"] == full["step"]["total"] / full["six_n_d"]


def test_params_match_the_reference_model(api):
    for name, cfg in CONFIGS.items():
        body = api.ok("/api/v1/flops/transformer", {"model": cfg, "seq_len": 8})
        model = lm_from_config(body["model"])
        assert body["params"]["total"] == sum(p.numel() for p in model.parameters()), name
        embedding = model.tok.weight.numel() + (model.pos.weight.numel() if model.pos is not None else 0)
        if not cfg.get("tied_embeddings", True):
            embedding += model.head.weight.numel()
        assert body["params"]["embedding"] == embedding, name


def test_transformer_rejections_name_their_field(api):
    gpt2 = {"model": "gpt2", "batch_size": 1, "seq_len": 2048}
    assert_names_field(api.post("/api/v1/flops/transformer", gpt2), "seq_len")
    bad_heads = {"model": {"n_layers": 2, "d_model": 64, "n_heads": 8, "n_kv_heads": 3, "vocab_size": 9}}
    assert_names_field(api.post("/api/v1/flops/transformer", bad_heads), "model.n_kv_heads")
    assert_names_field(api.post("/api/v1/flops/transformer", {"model": "gpt-5"}), "model")
    assert_names_field(api.post("/api/v1/flops/mlp", {"batch": 4, "dims": [8]}), "dims")
