"""`tally calc` takes the models of issue 13: a mixture-of-experts preset, and an inline
TransformerConfig with every new field (experts, top_k, the layers that stay dense as a
list, floats such as the logit softcaps) as --model or inside --json; its help lists every
field, since options come from the request models.

Expected counts are transformers' own: Mixtral-8x7B's published 46,702,792,704 parameters
(12,879,925,248 active with top-2), and a Qwen3-MoE built on the meta device from the config
typed below."""

import dataclasses
import json

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from app.accounting.transformer import TransformerConfig
from tests.support.cli import run_main

MIXTRAL_TOTAL, MIXTRAL_ACTIVE = 46_702_792_704, 12_879_925_248
FLOPS = "/api/v1/flops/transformer"

# A small Qwen3-MoE: 4 layers, the first and last dense (mlp_only_layers), 4 experts of width
# 32 with top-2 in the two between, per-head q/k norms, untied head.
QWEN3_MOE = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[0, 3],
                 tie_word_embeddings=False, max_position_embeddings=256)
# The same model as the API's inline TransformerConfig.
INLINE = {"n_layers": 4, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "d_ff": 128,
          "vocab_size": 1000, "max_seq_len": 256, "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
          "tied_embeddings": False, "position": "rope", "qk_norm": "head", "n_experts": 4, "top_k": 2,
          "d_ff_expert": 32, "mlp_only_layers": [0, 3]}
EXPERT = 3 * 64 * 32  # gate, up and down projections of one expert, d_model 64, width 32


def _transformers_count() -> int:
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**QWEN3_MOE))
    return sum(p.numel() for p in model.parameters())


def _calc(capsys, *argv: str) -> dict:
    status, out, err = run_main(capsys, "calc", *argv, "--compact")
    assert (status, err) == (0, ""), err
    return json.loads(out)


def test_a_mixture_of_experts_preset(capsys, api):
    argv = ["flops", "transformer", "--model", "mixtral-8x7b", "--seq-len", "4096", "--causal", "halved"]
    status, out, _ = run_main(capsys, "calc", *argv, "--compact")
    expected = api.post(FLOPS, {"model": "mixtral-8x7b", "seq_len": 4096, "causal": "halved"})
    assert status == 0 and out == expected.text + "\n"  # the API's bytes
    answer = json.loads(out)
    assert answer["params"]["total"] == MIXTRAL_TOTAL and answer["params"]["active"] == MIXTRAL_ACTIVE
    assert answer["forward"]["router"] > 0 and answer["forward"]["routed_experts"] > 0
    assert answer["six_n_d"] == 6 * MIXTRAL_ACTIVE * 4096


def test_an_inline_config_with_experts_and_dense_layers(capsys, api):
    answer = _calc(capsys, "flops", "transformer", "--model", json.dumps(INLINE), "--seq-len", "32")
    total = _transformers_count()
    assert answer["params"]["total"] == total
    assert answer["params"]["active"] == total - 2 * (4 - 2) * EXPERT  # two MoE layers, two experts idle
    assert answer["model"]["mlp_only_layers"] == [0, 3]
    assert answer == api.ok(FLOPS, {"model": INLINE, "seq_len": 32})
    # The same body through --json, with a float field beside the list one.
    softcapped = INLINE | {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
    body = _calc(capsys, "flops", "transformer", "--json", json.dumps({"model": softcapped, "seq_len": 32}))
    assert (body["model"]["attn_logit_softcapping"], body["model"]["final_logit_softcapping"]) == (50.0, 30.0)
    assert body["params"] == answer["params"]  # softcapping has no parameters
    memory = _calc(capsys, "memory", "training", "--model", json.dumps(INLINE), "--seq-len", "32")
    assert memory == api.ok("/api/v1/memory/training", {"model": INLINE, "seq_len": 32})


@pytest.mark.parametrize(("change", "field"), [
    ({"top_k": 5}, "model.top_k"),
    ({"mlp_only_layers": [7]}, "model.mlp_only_layers"),
    ({"attn_logit_softcapping": -1.0}, "model.attn_logit_softcapping"),
])
def test_an_inconsistent_inline_config_is_refused_naming_the_field(capsys, api, change, field):
    body = {"model": INLINE | change}
    status, _, err = run_main(capsys, "calc", "flops", "transformer", "--model", json.dumps(INLINE | change),
                              "--compact")
    expected = api.post(FLOPS, body)
    assert expected.status_code == 422 and status == 2
    assert err == expected.text + "\n"
    assert any(item["field"] == field for item in json.loads(err)["detail"]), err


def test_the_help_lists_every_config_field(capsys):
    status, out, _ = run_main(capsys, "calc", "flops", "transformer", "--help")
    assert status == 0
    text = " ".join(out.split())
    for f in dataclasses.fields(TransformerConfig):
        assert f.name in text, f.name
