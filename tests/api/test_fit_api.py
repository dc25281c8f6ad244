"""POST /api/v1/fit: each option is the answer of its own calculator for the same settings, the
largest batch and context sit exactly at the edge of fitting, and advice is a change that fits."""

import pytest

URL = "/api/v1/fit"
ASK = {"model": "llama3-8b", "gpu": "rtx-4090", "seq_len": 2048}


@pytest.fixture(scope="module")
def on_a_4090():
    from tests.support.api import Api
    api = Api()
    yield api, {o["option"]: o for o in api.ok(URL, ASK)["options"]}
    api.close()


def _finetune(api, option: str, **extra) -> dict:
    body = {"model": "llama3-8b", "gpu": "rtx-4090", "seq_len": 2048, "batch_size": 1,
            "recompute": "selective", "precision": "bf16_mixed", "optimizer": "adamw"}
    if option == "qlora":
        body |= {"mode": "qlora", "base_format": "nf4_double_quant", "paged_optimizer": True}
    else:
        body["mode"] = option
    return api.ok("/api/v1/finetune", body | extra)


def test_every_option_is_its_calculators_answer(on_a_4090):
    api, options = on_a_4090
    assert list(options) == ["inference-bfloat16", "inference-fp8_e4m3", "inference-int8_channel",
                             "inference-awq_int4", "lora", "qlora", "full"]
    for fmt in ("bfloat16", "awq_int4"):
        served = api.ok("/api/v1/inference/memory", {"model": "llama3-8b", "gpu": "rtx-4090",
                                                     "weight_format": fmt, "context": 2048, "concurrency": 1})
        row = options[f"inference-{fmt}"]
        assert (row["total_bytes"], row["fits"]) == (served["total_bytes"], served["fits"])
        assert sum(row["bytes_by_kind"].values()) == served["total_bytes"]
    for option in ("lora", "qlora", "full"):
        step = _finetune(api, option)
        row = options[option]
        assert (row["total_bytes"], row["fits"]) == (step["memory"]["total"], step["memory"]["fits"])
        assert sum(row["bytes_by_kind"].values()) == step["memory"]["total"]
        assert row["seconds"] == step["time"]["seconds"]


def test_the_course_question_llama3_8b_on_a_24_gb_card(on_a_4090):
    """Serving in 16 bits fits; QLoRA fits; LoRA needs gradient checkpointing; full fine-tuning
    (16 bytes a parameter, 128 GB) needs several GPUs."""
    _, options = on_a_4090
    assert options["inference-bfloat16"]["fits"] and options["qlora"]["fits"]
    assert not options["lora"]["fits"] and "recompute full" in options["lora"]["advice"]
    assert not options["full"]["fits"] and "GPUs with ZeRO stage 3" in options["full"]["advice"]
    assert options["qlora"]["advice"] is None


def test_the_advice_is_a_change_that_fits(on_a_4090):
    api, options = on_a_4090
    assert _finetune(api, "lora", recompute="full")["memory"]["fits"]
    gpus = int(options["full"]["advice"].split(" on ")[1].split()[0])
    fits = [_finetune(api, "full", recompute="full", zero_stage=3, data_parallel=n)["memory"]["fits"]
            for n in (gpus // 2, gpus)]
    assert fits == [False, True]  # the smallest power of two that fits


@pytest.mark.parametrize("option", ["qlora", "lora"])
def test_largest_batch_and_context_are_the_edge(on_a_4090, option):
    api, options = on_a_4090
    row = options[option]
    batch, context = row["largest_batch"], row["largest_context"]
    if batch:
        assert _finetune(api, option, batch_size=batch)["memory"]["fits"]
    assert not _finetune(api, option, batch_size=batch + 1)["memory"]["fits"]
    assert _finetune(api, option, seq_len=context)["memory"]["fits"]
    assert not _finetune(api, option, seq_len=context + 1)["memory"]["fits"]


def test_serving_capacity_is_the_inference_calculators(on_a_4090):
    api, options = on_a_4090
    cap = api.ok("/api/v1/inference/capacity", {"model": "llama3-8b", "gpu": "rtx-4090", "context": 2048,
                                                "concurrency": 1})
    assert options["inference-bfloat16"]["largest_batch"] == cap["max_sequences"]
    assert options["inference-bfloat16"]["largest_context"] == cap["max_context"]


def test_an_h100_has_room_for_lora(api):
    options = {o["option"]: o for o in api.ok(URL, ASK | {"gpu": "h100-sxm", "batch_size": 4})["options"]}
    assert options["lora"]["fits"] and options["qlora"]["fits"] and not options["full"]["fits"]
    assert options["lora"]["largest_batch"] >= 4


def test_fp8_only_where_the_gpu_has_an_fp8_peak(api):
    a100 = [o["option"] for o in api.ok(URL, ASK | {"gpu": "a100-80gb"})["options"]]
    assert "inference-fp8_e4m3" not in a100 and "inference-int8_channel" in a100


@pytest.mark.parametrize(("body", "field"), [
    ({"seq_len": 100_000}, "seq_len"),
    ({"gpu": "tpu-v9"}, "gpu"),
    ({"lora_rank": 0}, "lora_rank"),
    ({"model": "no-such-model"}, "model"),
])
def test_bad_input_names_the_field(api, body, field):
    response = api.post(URL, ASK | body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == field


def test_a_format_the_model_cannot_take_is_left_out_and_said(api):
    """AWQ's groups of 128 do not divide a 64-wide model's matrices: that option is left out, with
    the reason, and the others are answered."""
    tiny = {"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab_size": 512, "max_seq_len": 512,
            "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False}
    answer = api.ok(URL, {"model": tiny, "gpu": "rtx-4090", "seq_len": 256})
    options = [o["option"] for o in answer["options"]]
    assert "inference-awq_int4" not in options and "inference-bfloat16" in options and "qlora" in options
    assert any(a.startswith("awq_int4 left out") for a in answer["assumptions"])


def test_serving_that_cannot_split_over_the_gpus_is_left_out_and_training_answered(api):
    """Tensor parallel 3 cannot split 32 heads, but FSDP shards training over three GPUs."""
    answer = api.ok(URL, ASK | {"num_gpus": 3})
    assert [o["option"] for o in answer["options"]] == ["lora", "qlora", "full"]
    assert answer["summary"].startswith("Serving: no weight format splits over these GPUs")
    assert any("left out: 3 does not divide" in a for a in answer["assumptions"])


def test_a_smaller_format_is_the_first_advice_where_it_fits(api):
    """Llama-2-13B's 26 GB of bf16 weights do not fit a 24 GB card: serving fits in FP8, and LoRA
    (already checkpointing) fits over an NF4 base, which is the QLoRA row's own answer."""
    answer = api.ok(URL, {"model": "llama2-13b", "gpu": "rtx-4090", "seq_len": 2048, "recompute": "full"})
    options = {o["option"]: o for o in answer["options"]}
    assert not options["inference-bfloat16"]["fits"] and options["inference-fp8_e4m3"]["fits"]
    assert options["inference-bfloat16"]["advice"] == "fits in FP8 E4M3"
    assert options["inference-bfloat16"]["advice_change"] == {"option": "inference-fp8_e4m3"}
    assert not options["lora"]["fits"] and options["qlora"]["fits"]
    assert options["lora"]["advice"] == "fits as QLoRA (an NF4 base)"
    assert options["lora"]["advice_change"] == {"option": "qlora"}


def test_the_lora_rows_say_the_targets_they_adapt(api):
    """peft's default for the family: q and v for Llama, the fused c_attn (qkv) for GPT-2."""
    for model, targets in (("llama3-8b", "q,v"), ("gpt2", "qkv")):
        answer = api.ok(URL, {"model": model, "gpu": "h100-sxm", "seq_len": 512, "lora_rank": 8})
        rows = {o["option"]: o for o in answer["options"]}
        for option in ("lora", "qlora"):
            assert rows[option]["settings"]["lora_targets"] == targets
            assert rows[option]["settings"]["lora_rank"] == 8


@pytest.mark.parametrize("stack", ["hf", "unsloth", "torchtune"])
def test_the_stack_is_the_fine_tuning_calculators(api, stack):
    """POST /api/v1/fit with a stack: each training row is POST /api/v1/finetune's answer under the
    same stack, its settings say which, and the assumptions name it."""
    answer = api.ok(URL, ASK | {"stack": stack, "recompute": "full"})
    rows = {o["option"]: o for o in answer["options"] if o["kind"] == "training"}
    for option in ("lora", "qlora", "full"):
        step = _finetune(api, option, stack=stack, recompute="full")
        assert rows[option]["total_bytes"] == step["memory"]["total"], option
        assert rows[option]["settings"]["stack"] == stack
    assert any(f"stack {stack}" in a for a in answer["assumptions"])


@pytest.mark.parametrize("stack", ["deepspeed", "Unsloth", 3])
def test_a_bad_stack_is_refused_naming_it(api, stack):
    from tests.support.api import assert_names_field

    assert_names_field(api.post(URL, ASK | {"stack": stack}), "stack")


@pytest.mark.parametrize("stack", ["unsloth", "torchtune"])
def test_largest_batch_and_context_are_the_edge_under_a_stack(api, stack):
    """Unsloth's loss runs in more chunks as the tokens grow, so its bytes are not linear in the batch:
    the largest batch is still the one that fits with the next that does not."""
    answer = api.ok(URL, ASK | {"stack": stack, "recompute": "full"})
    for row in (o for o in answer["options"] if o["option"] in ("lora", "qlora")):
        batch, context = row["largest_batch"], row["largest_context"]
        at = {"stack": stack, "recompute": "full"}
        assert _finetune(api, row["option"], batch_size=batch, **at)["memory"]["fits"]
        assert not _finetune(api, row["option"], batch_size=batch + 1, **at)["memory"]["fits"]
        assert _finetune(api, row["option"], seq_len=context, **at)["memory"]["fits"]
        if context < 8192:  # Llama 3 8B's max_seq_len caps it
            assert not _finetune(api, row["option"], seq_len=context + 1, **at)["memory"]["fits"]
