"""Serving FLOPs, exact against FlopCounterMode on transformers' own generation passes: a prefill
with the cache on and the LM head on the last position only (logits_to_keep=1, as generate()
runs it), then one decoded token reading the cache. Tiny models with random weights on the CPU
(routing needs real numbers), eager attention (every score computed, so the prefill is counted
with causal="full") and eager experts. Prompts below and above the configs' 16-token windows:
a decoded token in a windowed layer scores only the keys its window holds."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.hf.read import import_config
from app.accounting.inference import roofline
from tests.support.hf_configs_dense import SMALL
from tests.support.hf_configs_moe import SMALL as MOE
from tests.support.hf_oracle import one_thread

FAMILIES = {
    "llama-gqa": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100},
    "falcon-mq": SMALL["falcon-mq"],
    "gemma2": SMALL["gemma2"],
    "gemma3_text": SMALL["gemma3_text"],
    "mistral-window": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 96,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
                       "vocab_size": 100, "sliding_window": 16},
    "qwen2-window": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "vocab_size": 100, "use_sliding_window": True, "sliding_window": 16,
                     "max_window_layers": 0},
    "mixtral": MOE["mixtral"],
    "qwen3_moe": MOE["qwen3_moe"],
}


def generation_flops(config: dict, batch: int, prompt: int, model_out: list | None = None) -> tuple[int, int]:
    """(prefill, one decode step) FLOPs as FlopCounterMode counts transformers' passes; the
    model is appended to `model_out` when given."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with one_thread():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                 experts_implementation="eager").eval()
        if model_out is not None:
            model_out.append(model)
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt))
        with torch.no_grad():
            with FlopCounterMode(display=False) as first:
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            step = out.logits[:, -1:].argmax(-1)
            with FlopCounterMode(display=False) as second:
                model(input_ids=step, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
    return first.get_total_flops(), second.get_total_flops()


@pytest.mark.parametrize("prompt", [12, 40])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_prefill_and_decode_flops_match_flop_counter_mode(name, prompt):
    cfg = import_config(FAMILIES[name]).config
    prefill, decode = generation_flops(FAMILIES[name], 2, prompt)
    assert roofline.prefill_flops(cfg, prompt=prompt, sequences=2, causal="full") == prefill
    # The decoded token scores the prompt's keys and its own.
    assert 2 * roofline.decode_flops(cfg, context=prompt + 1) == decode


def test_latent_attention_decode_as_transformers_runs_it():
    """transformers 5.23's DeepSeek-V3 caches the latent (kv_lora_rank, with the rotary key
    beside it) and decompresses every cached token through kv_b_proj at each step, then attends
    as multi-head attention. That is Tally's "decompressed" step plus kv_b_proj over the
    prompt's cached latents; vLLM and FlashMLA absorb kv_b_proj instead (see the next test)."""
    config, models = MOE["deepseek_v3"], []
    cfg = import_config(config).config
    _, decode = generation_flops(config, 2, 12, models)
    kv_b = sum(layer.self_attn.kv_b_proj.weight.numel() for layer in models[0].model.layers)
    expected = 2 * roofline.decode_flops(cfg, context=13, mla_cache="decompressed") + 2 * 2 * 12 * kv_b
    assert expected == decode


def test_absorbed_latent_decode_against_the_einsums_it_runs():
    """The absorbed decode of one token against `ctx` cached latents, written as vLLM's MLA
    decode computes it (W_UK into the query, scores over latent + rope, values over the latent,
    W_UV on the output), counted by FlopCounterMode beside the decompressed attention it
    replaces (kv_b_proj on the new token, per-head scores and values)."""
    config = MOE["deepseek_v3"]
    cfg = import_config(config).config
    h, r, rope, nope, v, ctx = 4, 16, 4, 8, 8, 13
    q_nope, q_rope = torch.randn(h, nope), torch.randn(h, rope)
    w_uk, w_uv = torch.randn(h, nope, r), torch.randn(h, r, v)
    latent, k_rope = torch.randn(ctx, r), torch.randn(ctx, rope)
    with FlopCounterMode(display=False) as absorbed:
        q_latent = torch.einsum("hn,hnr->hr", q_nope, w_uk)
        scores = q_latent @ latent.T + q_rope @ k_rope.T
        out = torch.einsum("hr,hrv->hv", scores.softmax(-1) @ latent, w_uv)
    new_latent = torch.randn(1, r)
    keys, values = torch.randn(h, ctx, nope + rope), torch.randn(h, ctx, v)
    with FlopCounterMode(display=False) as plain:
        new_latent @ torch.randn(r, h * (nope + v))  # kv_b_proj on the new token
        scores = torch.einsum("hd,hcd->hc", torch.randn(h, nope + rope), keys)
        torch.einsum("hc,hcv->hv", scores, values)
    del out
    layers = cfg.n_layers
    difference = roofline.decode_flops(cfg, context=ctx) - roofline.decode_flops(
        cfg, context=ctx, mla_cache="decompressed")
    assert difference == layers * (absorbed.get_total_flops() - plain.get_total_flops())


def test_halved_prefill_counts_the_causal_triangle():
    """FlashAttention's prefill: every projection as eager, scores over S^2/2 pairs per head."""
    cfg = import_config(FAMILIES["llama-gqa"]).config
    full = roofline.prefill_flops(cfg, prompt=64, causal="full")
    halved = roofline.prefill_flops(cfg, prompt=64)
    # Q @ K^T and softmax @ V: 2 x 2 x heads x head_dim FLOPs per scored pair, per layer.
    per_pair = 2 * 2 * 4 * 16 * 2
    assert full - halved == per_pair * (64 * 64 - 64 * 64 // 2)


def test_moe_decode_reads_fewer_experts_than_it_has():
    """top_k of n picked uniformly: the expected distinct experts after t tokens, by simulation."""
    cfg = import_config(FAMILIES["qwen3_moe"]).config  # 8 experts, top 3
    gen = torch.Generator().manual_seed(0)
    for tokens in (1, 2, 4, 16):
        trials = [len(set(torch.cat([torch.randperm(8, generator=gen)[:3] for _ in range(tokens)]).tolist()))
                  for _ in range(4000)]
        assert roofline.experts_read(cfg, tokens) == pytest.approx(sum(trials) / len(trials), rel=0.02)
    assert roofline.experts_read(cfg, 1) == 3
