"""The hybrid families against transformers 5.23: Qwen3-Next (gated DeltaNet beside gated attention),
Bamba (Mamba-2 beside attention), Jamba (Mamba-1 beside attention, with experts), Nemotron-H (one
block a layer: Mamba-2, attention, an MLP or experts) and Falcon-H1 (attention and Mamba-2 side by side
in every layer).

Parameters (total and active) of the published configs and seeded random ones, on the meta device. Their
FLOPs are in test_flops_hf_hybrid.py, their state and cache in test_state_hf.py.
"""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.hf import import_config
from app.accounting.inference.kv_cache import kv_cache
from tests.support.hf_configs_hybrid import (
    BAMBA_9B,
    FALCON_H1_7B,
    JAMBA_V01,
    NEMOTRON_NANO_9B_V2,
    QWEN3_NEXT_80B,
    random_configs,
)

IMPORT = "/api/v1/models/import"


def built(config: dict, device: str):
    body = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    cfg = AutoConfig.for_model(config["model_type"], **body)
    with torch.device(device):
        return cfg, AutoModelForCausalLM.from_config(
            cfg, attn_implementation="eager", experts_implementation="eager"
        )


def hf_counts(config: dict) -> tuple[int, int]:
    """(total, active): active leaves out all but num_experts_per_tok slices of the routed experts."""
    cfg, model = built(config, "meta")
    total = sum(p.numel() for p in model.parameters())
    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts")]
    routed = [(p.numel(), m.num_experts) for m in experts for p in m.parameters()]
    return total, total - sum(n for n, _ in routed) + sum(n // e * cfg.num_experts_per_tok for n, e in routed)


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [
        (QWEN3_NEXT_80B, 79_674_391_296, 3_874_929_408),
        (BAMBA_9B, 9_780_235_392, 9_780_235_392),
        (JAMBA_V01, 51_570_323_328, 12_110_311_296),
        (NEMOTRON_NANO_9B_V2, 8_888_227_328, 8_888_227_328),
        (FALCON_H1_7B, 7_585_513_568, 7_585_513_568),
    ],
    ids=["qwen3-next-80b-a3b", "bamba-9b", "jamba-v0.1", "nemotron-nano-9b-v2", "falcon-h1-7b"],
)
def test_published_hybrids_are_transformers_counts(api, config, total, active):
    body = api.ok(IMPORT, config)
    assert (body["params"]["total"], body["params"]["active"]) == hf_counts(config) == (total, active)
    assert not any("does not know" in w for w in body["warnings"])


def test_jamba_is_the_cards_52b_with_12b_active(api):
    body = api.ok(IMPORT, JAMBA_V01)
    assert body["params"]["total"] == pytest.approx(52e9, rel=0.01)
    assert body["params"]["active"] == pytest.approx(12e9, rel=0.01)
    assert body["config"]["layer_mixers"][4::8] == ["attention"] * 4 and body["config"]["moe_every"] == 2


def test_nemotron_nano_9b_v2_is_the_cards_8_89b_and_its_mlp_layers_hold_no_state():
    cfg = import_config(NEMOTRON_NANO_9B_V2).config
    assert (cfg.mixers.count("mamba2"), cfg.mixers.count("attention"), cfg.mixers.count("none")) == (
        27,
        4,
        25,
    )
    assert len(cfg.mlp_free_layers) == 31
    # One norm per layer: 56 block norms and the final one, all of width 4,480, plus the Mamba-2 gated norms.
    assert import_config(NEMOTRON_NANO_9B_V2).params.norms == 57 * 4480 + 27 * 128 * 80
    cache = kv_cache(cfg, context=4096, model_dtype="bfloat16", block_size=None)
    assert (cache.full_layers, cache.state_layers) == (4, 27)
    # vLLM's per-layer state: 3 x (10,240 + 2 x 8 x 128) conv values and 128 x 80 x 128 SSM values, bf16.
    assert cache.state_bytes_per_sequence == 27 * (3 * (128 * 80 + 2 * 8 * 128) + 128 * 80 * 128) * 2


def test_qwen3_next_is_the_cards_80b_with_3b_active_less_its_embeddings(api):
    body = api.ok(IMPORT, QWEN3_NEXT_80B)
    embeddings = 2 * 151_936 * 2048  # input table and the untied head
    assert body["params"]["total"] == pytest.approx(80e9, rel=0.01)
    assert body["params"]["active"] - embeddings == pytest.approx(3e9, rel=0.1)
    mixers = body["config"]["layer_mixers"]
    assert mixers.count("gated_delta_net") == 36 and mixers[3::4] == ["attention"] * 12


@pytest.mark.parametrize("config", random_configs(4, 41), ids=lambda c: c["model_type"])
def test_random_hybrids_are_transformers_counts(api, config):
    body = api.ok(IMPORT, config)
    assert (body["params"]["total"], body["params"]["active"]) == hf_counts(config)
