"""Configs no model has are refused with a 422 naming the field to change, whichever
calculator receives them; the structure fields mean what their docs say."""

import pytest

MIXTRAL_LIKE = {"n_layers": 4, "d_model": 256, "n_heads": 8, "n_kv_heads": 2, "vocab_size": 1000, "d_ff": 512,
                "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": False,
                "position": "rope", "n_experts": 8, "top_k": 2}
MLA = {"n_layers": 2, "d_model": 256, "n_heads": 4, "vocab_size": 1000, "mlp": "swiglu", "norm": "rmsnorm",
       "bias": False, "position": "rope", "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
       "v_head_dim": 32}
DENSE = {"n_layers": 2, "d_model": 128, "n_heads": 4, "vocab_size": 500}

REFUSED = [
    (MIXTRAL_LIKE | {"top_k": 9}, "top_k"),
    ({k: v for k, v in MIXTRAL_LIKE.items() if k != "top_k"}, "top_k"),
    (DENSE | {"top_k": 2}, "top_k"),
    (DENSE | {"n_shared_experts": 1}, "n_shared_experts"),
    (DENSE | {"first_dense_layers": 1}, "first_dense_layers"),
    (MIXTRAL_LIKE | {"d_ff_shared": 128}, "d_ff_shared"),
    (MIXTRAL_LIKE | {"mlp_only_layers": [4]}, "mlp_only_layers"),
    (MIXTRAL_LIKE | {"mlp_only_layers": [-1]}, "mlp_only_layers"),
    (MIXTRAL_LIKE | {"n_experts": 0}, "n_experts"),
    ({k: v for k, v in MLA.items() if k != "v_head_dim"}, "v_head_dim"),
    ({k: v for k, v in MLA.items() if k != "qk_rope_head_dim"}, "qk_rope_head_dim"),
    (DENSE | {"q_lora_rank": 64}, "q_lora_rank"),
    (DENSE | {"qk_nope_head_dim": 64}, "qk_nope_head_dim"),
    (MLA | {"qk_norm": "head"}, "qk_norm"),
    (DENSE | {"sliding_window": 0}, "sliding_window"),
    (DENSE | {"global_every": 2}, "global_every"),
    (DENSE | {"sliding_window": 64, "global_every": 0}, "global_every"),
    (DENSE | {"attn_logit_softcapping": 0}, "attn_logit_softcapping"),
    (DENSE | {"final_logit_softcapping": -30.0}, "final_logit_softcapping"),
    (DENSE | {"norm_layout": "middle"}, "norm_layout"),
    (DENSE | {"qk_norm": "both"}, "qk_norm"),
    (DENSE | {"mlp": "reglu"}, "mlp"),
]


@pytest.mark.parametrize(("config", "field"), REFUSED)
@pytest.mark.parametrize("route", ["/api/v1/flops/transformer", "/api/v1/memory/training"])
def test_inconsistent_config_is_a_422_naming_the_field(api, config, field, route):
    body = {"model": config, "batch_size": 1, "seq_len": 64}
    if route.endswith("training"):
        body = {"model": config, "seq_len": 64, "batch_size": 1}
    response = api.post(route, body)
    assert response.status_code == 422, response.text
    assert f"model.{field}" in response.text


def test_moe_layers_follow_dense_first_sparse_step_and_mlp_only_layers(api):
    """Layer i is MoE when i >= first_dense_layers, (i+1) % moe_every == 0 and i is not in
    mlp_only_layers. Counted by hand: layers 0..7, first 1 dense, every 2nd, layer 5 dense
    -> MoE layers 1, 3, 7: three routers of 256 x 8."""
    cfg = MIXTRAL_LIKE | {"n_layers": 8, "first_dense_layers": 1, "moe_every": 2, "mlp_only_layers": [5]}
    params = api.ok("/api/v1/flops/transformer", {"model": cfg, "batch_size": 1, "seq_len": 16})["params"]
    assert params["router"] == 3 * 256 * 8
    assert params["routed_experts"] == 3 * 8 * 3 * 256 * 512
    assert params["routed_experts_active"] == 3 * 2 * 3 * 256 * 512
    assert params["mlp"] == 5 * 3 * 256 * 512  # five dense layers, no MLP biases
    assert params["active"] == params["total"] - 3 * 6 * 3 * 256 * 512


def test_shared_experts_default_to_n_shared_times_the_expert_width(api):
    cfg = MIXTRAL_LIKE | {"n_shared_experts": 2, "d_ff_expert": 64}
    params = api.ok("/api/v1/flops/transformer", {"model": cfg, "batch_size": 1, "seq_len": 16})["params"]
    assert params["shared_experts"] == 4 * 3 * 256 * (2 * 64)
    gated_cfg = cfg | {"shared_expert_gate": True, "d_ff_shared": 96}
    body = {"model": gated_cfg, "batch_size": 1, "seq_len": 16}
    gated = api.ok("/api/v1/flops/transformer", body)["params"]
    assert gated["shared_experts"] == 4 * (3 * 256 * 96 + 256)


def test_windows_and_softcapping_change_no_parameter(api):
    plain = api.ok("/api/v1/flops/transformer", {"model": DENSE, "batch_size": 1, "seq_len": 64})
    local = api.ok("/api/v1/flops/transformer", {
        "model": DENSE | {"sliding_window": 16, "global_every": 2, "attn_logit_softcapping": 50.0},
        "batch_size": 1, "seq_len": 64})
    assert local["params"] == plain["params"]
    assert local["forward"] == plain["forward"]  # causal "full": eager attention scores every pair


def _band_pairs(seq: int, window: int | None) -> int:
    """(query, key) pairs a causal mask keeps: key <= query, within `window` of it."""
    return sum(min(q + 1, window or seq) for q in range(seq))


@pytest.mark.parametrize(("seq", "window"), [(64, 16), (64, 64), (96, 40), (64, 200)])
def test_halved_attention_counts_the_causal_band(api, seq, window):
    """'halved' counts the band's area, S^2/2 - (S-w)^2/2: the exact mask count less half
    the diagonal's width (S/2 globally, w/2 in a window), so within 1/w of it."""
    cfg = DENSE | {"sliding_window": window}
    scores = api.ok("/api/v1/flops/transformer", {"model": cfg, "batch_size": 1, "seq_len": seq,
                                                  "causal": "halved"})["forward"]["attention_scores"]
    per_pair = 2 * DENSE["n_layers"] * DENSE["n_heads"] * (128 // 4)
    exact = _band_pairs(seq, window)
    half_diagonal = min(seq, window) / 2
    assert scores == per_pair * (exact - half_diagonal)


def test_gemma_pattern_windows_all_but_every_nth_layer(api):
    """global_every=3 over 6 layers: layers 2 and 5 global, four windowed."""
    cfg = DENSE | {"n_layers": 6, "sliding_window": 8, "global_every": 3}
    seq = 64
    scores = api.ok("/api/v1/flops/transformer", {"model": cfg, "batch_size": 1, "seq_len": seq,
                                                  "causal": "halved"})["forward"]["attention_scores"]
    per_layer_pair = 2 * DENSE["n_heads"] * 32
    expected = 2 * (_band_pairs(seq, None) - seq / 2) + 4 * (_band_pairs(seq, 8) - 8 / 2)
    assert scores == per_layer_pair * expected
