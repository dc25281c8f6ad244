""""Will it run?" gives advice that can be followed: over many models, GPUs, GPU counts, sequence
lengths and batches, every option that does not fit says what would make it fit, as a change to
the request (advice_change), and applying that change makes it fit (or, for an `option`, that
other option fits as asked). Hypothesis draws the cases; the service is called in process."""

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.accounting import hardware, models
from app.accounting.inference.formats import FORMATS
from app.api.services.fit import FitRequest, answer

MODELS = ["gpt2", "llama3.2-1b", "llama3-8b", "mistral-7b", "qwen3-8b", "gemma-2-9b", "llama2-13b",
          "qwen3-30b-a3b", "mixtral-8x7b", "qwen3-32b", "llama3-70b", "mixtral-8x22b", "llama3.1-405b"]
GPUS = [g for g in hardware.catalogue() if not g.startswith("tpu")]


def _answer(ask: dict):
    return answer(FitRequest.model_validate(ask))


# no shrinking: a case costs about a second, and the assertion names the whole request
@settings(max_examples=40, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), num_gpus=st.sampled_from([1, 1, 2, 4, 8]),
       seq_len=st.sampled_from([512, 2048, 4096, 8192]), batch_size=st.sampled_from([1, 1, 4]),
       recompute=st.sampled_from(["selective", "none", "full"]))
def test_every_piece_of_advice_makes_its_option_fit(model, gpu, num_gpus, seq_len, batch_size, recompute):
    seq_len = min(seq_len, models.preset(model).max_seq_len)
    ask = {"model": model, "gpu": gpu, "num_gpus": num_gpus, "seq_len": seq_len, "batch_size": batch_size,
           "recompute": recompute}
    first = _answer(ask)
    for option in first.options:
        if option.fits:
            assert option.advice is None and option.advice_change is None
            continue
        if option.advice_change is None:  # no change found: it says so, and promises nothing
            assert option.advice.startswith("does not fit"), option.advice
            continue
        change = dict(option.advice_change)
        other = change.pop("option", option.option)
        followed = _answer(ask | change) if change else first
        after = {o.option: o for o in followed.options}
        assert after[other].fits, (ask, option.option, option.advice, change, after[other].total_bytes)


def test_the_audits_case_lora_70b_on_h100s_fits_where_it_says():
    """LoRA shards its frozen base over the GPUs (ZeRO 3, as FSDP runs it): 70B on two H100s, each of
    the 79.2 GiB its device reports (on 80e9 bytes, the datasheet's reading, it took four)."""
    ask = {"model": "llama3-70b", "gpu": "h100-sxm", "seq_len": 4096}
    lora = {o.option: o for o in answer(FitRequest.model_validate(ask)).options}["lora"]
    assert lora.advice_change == {"num_gpus": 2, "recompute": "full"}
    after = {o.option: o for o in answer(FitRequest.model_validate(ask | lora.advice_change)).options}
    assert after["lora"].fits and after["lora"].settings["zero_stage"] == 3
    # Llama 3 70B's 70.55B parameters (model card: 70B) in bf16, half on each GPU, not all 141 GB
    frozen = after["lora"].bytes_by_kind["frozen_weights"]
    assert 70.5e9 * 2 / 2 < frozen < 70.6e9 * 2 / 2


@pytest.mark.parametrize(("ask", "said"), [
    # FP8's 72.8 GB of weights leave vLLM's 0.9 share of the 85.1 GB an H100 reports room for one
    # 4096-token sequence (its published TP2 logs: 33.88 GiB of fp8 weights a rank, 1.96 GiB peak)
    ({"model": "llama3-70b", "gpu": "h100-sxm", "seq_len": 4096},
     "Serving fits in FP8 E4M3, INT8 and AWQ 4-bit (GEMM); LoRA: fits on 2 GPUs"),
    ({"model": "llama3-8b", "gpu": "h100-sxm", "seq_len": 2048}, "Serving fits in bfloat16, FP8 E4M3, INT8 and "),
])
def test_the_summary_says_one_thing_per_way_to_run_it(ask, said):
    summary = answer(FitRequest.model_validate(ask)).summary
    assert summary.startswith(said), summary
    assert summary.count("Serving") == 1 and "Serving in" not in summary


def test_a_gpu_without_bfloat16_serves_and_trains_in_float16():
    """A V100 has no bfloat16 path: vLLM serves a bf16 model in float16 there, and AMP trains in fp16."""
    got = _answer({"model": "llama3-8b", "gpu": "v100-sxm2", "seq_len": 512})
    options = {o.option: o for o in got.options}
    assert "inference-float16" in options and "inference-bfloat16" not in options
    assert options["inference-float16"].fits and options["lora"].fits
    assert any("fp16 (no bf16 path on this GPU) mixed precision" in a for a in got.assumptions)


def test_gpt_oss_120b_serves_on_one_h100_in_its_published_mxfp4():
    """The year's question: gpt-oss-120b on one H100. Its checkpoint stores the experts in MXFP4
    (65,248,815,744 bytes): /fit offers that format beside the usual ones, and it fits, where
    bf16 and FP8 do not."""
    got = _answer({"model": "gpt-oss-120b", "gpu": "h100-sxm", "seq_len": 4096})
    options = {o.option: o for o in got.options}
    served = [o for o in got.options if o.kind == "inference"]
    bits = [FORMATS[o.option.removeprefix("inference-")].bits_per_weight for o in served]
    assert bits == sorted(bits, reverse=True)  # largest first, as the advice reads them
    mxfp4 = options["inference-mxfp4"]
    assert mxfp4.fits and mxfp4.bytes_by_kind["weights"] == 65_248_815_744
    assert not options["inference-bfloat16"].fits and options["inference-bfloat16"].advice == "fits in MXFP4"
    assert not options["inference-fp8_e4m3"].fits


def test_every_published_format_is_a_known_format():
    named = {n: p.published_format for n, p in models.presets().items() if p.published_format}
    assert named["gpt-oss-20b"] == named["gpt-oss-120b"] == "mxfp4"
    assert named["deepseek-v3"] == "fp8_e4m3_block128" and set(named.values()) <= set(FORMATS)


def test_llama4_scout_serves_on_one_h100_in_int4():
    """Meta's card: Scout fits on a single H100 with int4 quantization. Here: AWQ int4 fits at
    4,096 tokens, and the larger formats say so."""
    got = _answer({"model": "llama4-scout", "gpu": "h100-sxm", "seq_len": 4096})
    options = {o.option: o for o in got.options}
    assert options["inference-awq_int4"].fits
    assert [options[f"inference-{f}"].fits for f in ("bfloat16", "fp8_e4m3", "int8_channel")] == [False] * 3
    assert options["inference-fp8_e4m3"].advice == "fits in AWQ 4-bit (GEMM)"
