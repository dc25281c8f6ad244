"""POST /api/v1/finetune: the step of each mode, consistent with the calculators it is built from
(training memory for full, the bitsandbytes-checked weight formats for a QLoRA base, peft's
count for the adapters), and refusals naming the field."""

import pytest

from app.accounting.finetune.lora import lora_params
from app.accounting.finetune.memory import QLORA_KEEP
from app.accounting.inference.quant import weight_bytes
from app.accounting.models import preset
from app.api.services.finetune import FineTuneRequest
from tests.support.api import assert_names_field

URL = "/api/v1/finetune"
BASE = {"model": "llama3.2-1b", "seq_len": 512, "batch_size": 2}


def test_full_mode_is_the_training_calculator(api):
    ours = api.ok(URL, BASE | {"mode": "full"})
    training = api.ok("/api/v1/memory/training", BASE | {"precision": "bf16_mixed", "optimizer": "adamw"})
    assert ours["memory"]["total"] == training["total"]
    assert ours["memory"]["activations"] == training["activations"]
    assert sum(ours["memory"]["activation_items"].values()) == training["activations"]
    flops = api.ok("/api/v1/flops/transformer", BASE)
    assert ours["flops"]["total"] == flops["step"]["total"]


def test_freezing_nothing_is_full_fine_tuning(api):
    """Two roads to the same step: the walk over a graph with nothing frozen, and the training
    calculator."""
    free = api.ok(URL, BASE | {"mode": "freeze"})
    full = api.ok(URL, BASE | {"mode": "full"})
    for key in ("parameters", "gradients", "optimizer_state", "master_weights", "activations", "transient",
                "total"):
        assert free["memory"][key] == full["memory"][key], key
    assert free["flops"]["total"] == full["flops"]["total"]


def test_lora_trains_only_the_adapters(api):
    answer = api.ok(URL, BASE | {"mode": "lora", "lora_rank": 8, "lora_targets": ["q", "k", "v", "o"]})
    cfg = preset("llama3.2-1b")
    count = lora_params(cfg, rank=8, targets=("q", "k", "v", "o"))  # peft's count (test_lora_peft)
    mem = answer["memory"]
    assert answer["trainable_params"] == mem["trainable_params"] == count.trainable_params
    assert mem["frozen_params"] == count.base_params
    # bf16 mixed precision: 2-byte weights and gradients, fp32 master and two fp32 Adam moments
    assert (mem["parameters"], mem["gradients"]) == (2 * count.trainable_params, 2 * count.trainable_params)
    assert (mem["master_weights"], mem["optimizer_state"]) == (4 * count.trainable_params,
                                                                8 * count.trainable_params)
    assert mem["frozen_weights"] == 2 * count.base_params
    assert answer["adapter_params_by_target"] == count.by_target


def test_frozen_matrices_keep_no_inputs_and_adapters_keep_theirs(api):
    lora = api.ok(URL, BASE | {"mode": "lora", "lora_targets": ["q", "v"]})["memory"]["activation_items"]
    full = api.ok(URL, BASE | {"mode": "full"})["memory"]["activation_items"]
    frozen_inputs = ("mlp/up_input", "mlp/down_input", "head/lm_head_input")
    for frozen_input in frozen_inputs:
        assert frozen_input in full and frozen_input not in lora, frozen_input
    assert "attention/qkv_input" in lora  # lora_A of q and v reads it
    # o's input is attention's output, which attention keeps for its own backward (SDPA's O)
    assert lora["attention/output_proj_input"] == full["attention/output_proj_input"]
    s_b, rank, layers = 512 * 2, 16, 16
    assert lora["lora/q_A_output"] == lora["lora/v_A_output"] == s_b * rank * 2 * layers
    # the stream still needs its norms' and MLP's saved tensors for the input gradients
    assert lora["mlp/gate_output"] == full["mlp/gate_output"]


def test_qlora_base_is_the_weight_format_bitsandbytes_stores(api):
    """The base's bytes are inference/quant.py's NF4 bytes, which test_quant_formats checks
    against bitsandbytes' own quantized tensors, with what transformers leaves unquantized kept
    (test_quant_formats' test_nf4_quantizes_the_layers_transformers_hands_to_bitsandbytes)."""
    for fmt in ("nf4", "nf4_double_quant", "int8_channel"):
        answer = api.ok(URL, BASE | {"mode": "qlora", "base_format": fmt})
        expected = weight_bytes(preset("llama3.2-1b"), fmt, keep=QLORA_KEEP, base_dtype="bfloat16")
        assert answer["memory"]["frozen_weights"] == expected.total_bytes
        assert answer["memory"]["base_format"] == fmt


def test_modes_order_by_memory_and_a_paged_optimizer_fits_without_its_state(api):
    totals = {mode: api.ok(URL, {"model": "llama3-8b", "mode": mode, "seq_len": 2048,
                                 "recompute": "full"})["memory"]["total"]
              for mode in ("qlora", "lora", "full")}
    assert totals["qlora"] < totals["lora"] < totals["full"]
    # Full fine-tuning of 8B parameters on an 80 GB H100: 16 bytes a parameter do not fit; paged,
    # Adam's 8 of them may live in host memory, and the rest does fit.
    body = {"model": "llama3-8b", "mode": "full", "seq_len": 2048, "recompute": "full", "gpu": "h100-sxm"}
    plain, paged = (api.ok(URL, body | {"paged_optimizer": p})["memory"] for p in (False, True))
    assert plain["total"] == paged["total"] > paged["gpu_memory_bytes"] and not plain["fits"]
    assert paged["fits"] and paged["total"] - paged["optimizer_state"] <= paged["gpu_memory_bytes"]


def test_step_time_is_the_step_flops_at_the_mfu(api):
    answer = api.ok(URL, BASE | {"mode": "lora", "gpu": "h100-sxm", "mfu": 0.4, "recompute": "none"})
    peak = api.get("/api/v1/hardware/h100-sxm").json()["peak_flop_per_sec"]["bfloat16"]
    assert answer["time"]["seconds"] == pytest.approx(answer["flops"]["total"] / (0.4 * peak))
    assert answer["flops"]["backward"] < 2 * answer["flops"]["forward"]
    # Selective recompute (the default) redoes attention's core: its FLOPs are in the time too.
    redone = api.ok(URL, BASE | {"mode": "lora", "gpu": "h100-sxm", "mfu": 0.4})["time"]
    assert redone["recompute_flops"] > 0
    assert redone["seconds"] == pytest.approx((answer["flops"]["total"] + redone["recompute_flops"]) / (0.4 * peak))


@pytest.mark.parametrize(("body", "field"), [
    ({"mode": "lora", "lora_rank": 0}, "lora_rank"),
    ({"model": "mixtral-8x7b", "mode": "lora", "lora_targets": ["q", "gate"]}, "lora_targets.1"),
    ({"mode": "lora", "lora_targets": ["q", "qkv"]}, "lora_targets.1"),
    ({"mode": "qlora", "base_format": "awq_int4"}, "base_format"),
    ({"mode": "qlora", "base_format": "bfloat16"}, "base_format"),
    ({"mode": "qlora", "precision": "fp32"}, "precision"),
    ({"mode": "lora", "optimizer": "sgd", "paged_optimizer": True}, "paged_optimizer"),
    ({"mode": "lora", "freeze_layers": 2}, "mode"),
    ({"mode": "full", "train_head": True}, "mode"),
    ({"mode": "freeze", "freeze_layers": 17}, "freeze_layers"),
    ({"mode": "freeze", "freeze_embeddings": True}, "freeze_head"),  # llama3.2-1b ties its head
    ({"model": "deepseek-v2-lite", "mode": "lora"}, "model"),
    ({"mode": "bitfit"}, "mode"),
    ({"mode": "lora", "stack": "megatron"}, "stack"),
    ({"mode": "qlora", "stack": "HF"}, "stack"),
    ({"mode": "lora", "stack": None}, "stack"),
])
def test_bad_input_names_the_field(api, body, field):
    response = api.post(URL, BASE | body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == field


def test_expert_adapters_keep_a_merged_copy_of_each_layers_experts(api):
    """peft folds expert adapters into W + B A: the experts' matmuls keep that merged weight (a
    copy of the layer's experts in the parameter dtype) and their inputs, as trained experts do."""
    body = {"model": "qwen3-30b-a3b", "mode": "lora", "seq_len": 256, "lora_rank": 8}
    plain = api.ok(URL, body | {"lora_targets": ["q", "v"]})["memory"]["activation_items"]
    experts = api.ok(URL, body | {"lora_targets": ["q", "v", "experts_gate_up", "experts_down"]})["memory"]
    items = experts["activation_items"]
    layers, e, d, ff = 48, 128, 2048, 768
    assert items["lora/experts_gate_up_merged"] == layers * e * 2 * ff * d * 2
    assert items["lora/experts_down_merged"] == layers * e * ff * d * 2
    assert "moe/expert_inputs" in items and "moe/expert_inputs" not in plain


EVERY = ["q", "k", "v", "o", "gate", "up", "down"]
PEFT_EVERY = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_peft_s_module_names_answer_as_the_short_targets(api):
    """q_proj and q name the same module: the answer is the same, byte for byte (the echoed
    request included); the schema documents the short names."""
    lora = BASE | {"mode": "lora"}
    experts = {"model": "qwen3-30b-a3b", "mode": "lora", "seq_len": 256, "lora_rank": 8}
    for body, peft, short in [(lora, ["q_proj", "v_proj"], ["q", "v"]), (lora, PEFT_EVERY, EVERY),
                              (lora, ["q", "v_proj", "down_proj"], ["q", "v", "down"]),
                              (experts, ["experts.gate_up_proj", "experts.down_proj"],
                               ["experts_gate_up", "experts_down"])]:
        assert api.ok(URL, body | {"lora_targets": peft}) == api.ok(URL, body | {"lora_targets": short}), peft
    description = FineTuneRequest.model_fields["lora_targets"].description
    assert "q, k, v, o, gate, up, down" in description and "q_proj" not in description


@pytest.mark.parametrize(("targets", "field", "says"), [
    (["q", "bogus"], "lora_targets.1", "unknown LoRA target 'bogus'"),
    (["qproj"], "lora_targets.0", "did you mean q_proj"),
    (["q_proj", "V_PROJ"], "lora_targets.1", "did you mean v_proj"),
])
def test_an_unknown_target_is_refused_naming_lora_targets(api, targets, field, says):
    response = api.post(URL, BASE | {"mode": "lora", "lora_targets": targets})
    body = assert_names_field(response, field)
    assert body["detail"][0]["field"].startswith("lora_targets") and says in body["message"], body


def test_qwen3_moe_mlp_targets_wrap_its_routed_experts_as_peft_does(api):
    """peft 0.21 maps Qwen3-MoE's gate_proj and up_proj onto the routed experts' gate_up_proj (rank
    2r) and down_proj onto their down_proj: 994,836,480 trainable parameters at r = 16, peft's own
    count of the model built on the meta device (tests/oracles/test_lora_peft.py)."""
    body = {"model": "qwen3-30b-a3b", "mode": "lora", "lora_rank": 16, "lora_targets": EVERY, "seq_len": 2048}
    answer = api.ok(URL, body)
    assert answer["trainable_params"] == answer["memory"]["trainable_params"] == 994_836_480
    assert list(answer["adapter_params_by_target"]) == ["q", "k", "v", "o", "experts_gate_up", "experts_down"]
    assert api.ok(URL, body | {"lora_targets": PEFT_EVERY}) == answer
    # gate without up: peft refuses it (the two are fused into one parameter)
    response = api.post(URL, body | {"lora_targets": ["q", "gate"]})
    assert "gate_up_proj" in assert_names_field(response, "lora_targets.1")["message"]


def test_the_stack_is_echoed_with_its_rules(api):
    """stack (app/accounting/finetune/stacks.py): the answer names it, the loss's chunks, what went to
    host memory, and the rules that applied with their sources."""
    body = BASE | {"mode": "qlora", "recompute": "full", "seq_len": 512}
    tally = api.ok(URL, body)["memory"]
    assert (tally["stack"], tally["loss_chunks"], tally["offloaded"]) == ("tally", 1, 0)
    unsloth = api.ok(URL, body | {"stack": "unsloth"})["memory"]
    # llama3.2-1b: 16 layers of d_model 2048; all but two checkpointed layer inputs (bf16) in host memory
    assert unsloth["stack"] == "unsloth" and unsloth["offloaded"] == 14 * 2 * 512 * 2048 * 2
    assert "recompute_layer" in unsloth["phases"] and "head/logits_fp32" not in unsloth["activation_items"]
    assert any("unsloth_zoo/gradient_checkpointing.py" in a for a in unsloth["assumptions"])
    torchtune = api.ok(URL, body | {"stack": "torchtune"})["memory"]
    assert torchtune["loss_chunks"] == 8
    hf = api.ok(URL, body | {"stack": "hf"})["memory"]
    assert any("prepare_model_for_kbit_training" in a for a in hf["assumptions"])
    # the stack changes memory only: the FLOPs and the time are the same
    steps = [api.ok(URL, body | {"stack": st, "gpu": "rtx-4090"}) for st in ("tally", "unsloth")]
    assert steps[0]["flops"] == steps[1]["flops"] and steps[0]["time"] == steps[1]["time"]
