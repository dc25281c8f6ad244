"""Training memory: the course's examples, the ZeRO paper's, Korthikanti et al.'s
formulas, and what PyTorch's autograd actually saves."""

import pytest
import torch

from app.accounting.training import memory
from tests.support.api import assert_names_field
from tests.support.reference import lm_from_config
from tests.support.devices import COURSE_H100_BYTES, H100_REPORTED_BYTES

TRAINING = "/api/v1/memory/training"


def test_course_largest_model_on_8_h100_with_adamw(api):
    # the course's reading of the datasheet's "80GB"; the catalogue's own is the device's report
    body = api.ok("/api/v1/memory/max-model",
                  {"gpu": "h100-sxm", "num_gpus": 8, "precision": "fp32", "optimizer": "adamw",
                   "gpu_overrides": {"memory_bytes": int(COURSE_H100_BYTES)}})
    h100_bytes = COURSE_H100_BYTES
    bytes_per_parameter = 4 + 4 + (4 + 4)  # parameters, gradients, optimizer state
    assert body["bytes_per_param"] == bytes_per_parameter
    assert body["max_params"] == (h100_bytes * 8) / bytes_per_parameter == 4.0e10


def test_course_7b_mixed_precision_adamw_is_16_bytes_per_param(api):
    body = api.ok(TRAINING, {"model": 7e9, "precision": "bf16_mixed", "optimizer": "adamw"})
    assert body["bytes_per_param"] == 2 + 2 + 4 + 8 == 16
    states = body["parameters"] + body["gradients"] + body["optimizer_state"] + body["master_weights"]
    assert states == body["model_state_bytes"] == 112e9
    assert body["activations"] is None and body["total"] == states
    assert any("activations" in note for note in body["assumptions"])


@pytest.mark.parametrize("stage,gb", [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(api, stage, gb):
    """Rajbhandari et al. 2020, Figure 1: 7.5B parameters, N_d = 64, mixed-precision Adam."""
    body = api.ok(TRAINING, {"model": 7.5e9, "precision": "fp16_mixed", "optimizer": "adam",
                             "zero_stage": stage, "data_parallel": 64})
    states = body["parameters"] + body["gradients"] + body["optimizer_state"] + body["master_weights"]
    assert round(states / 1e9, 1) == pytest.approx(gb, abs=0.05)


# Korthikanti et al. 2022, Table 2: activation bytes per layer for the GPT block it
# assumes (16-bit activations, dropout, d_ff = 4h, multi-head attention).
def paper_per_layer(s, b, h, a, t=1, sp=True, recompute="none"):
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    core = 0 if recompute == "selective" else 5 * a * s / h
    return s * b * h * (34 + core) / t if sp else s * b * h * (10 + 24 / t + core / t)


GPT_BLOCK = dict(n_layers=4, d_model=1024, n_heads=16, vocab_size=32000, max_seq_len=2048, dropout=True)


@pytest.mark.parametrize("t,sp", [(1, True), (2, True), (4, True), (4, False), (8, False)])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activations_follow_korthikanti_table_2(api, t, sp, recompute):
    s, b = 2048, 4
    body = api.ok(TRAINING, {"model": GPT_BLOCK, "batch_size": b, "seq_len": s, "precision": "bf16_mixed",
                             "tensor_parallel": t, "sequence_parallel": sp, "recompute": recompute})
    detail = body["activation_detail"]
    assert detail["per_layer_total"] == paper_per_layer(s, b, 1024, 16, t, sp, recompute)
    assert detail["layers_held"] == 4
    assert body["activations"] == detail["total"]


def saved_activation_bytes(cfg: dict, b: int, s: int, dtype: torch.dtype) -> int:
    """Bytes autograd keeps for backward: distinct storages, parameters excluded."""
    model = lm_from_config(cfg, device="cpu").to(dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, cfg["vocab_size"], (b, s))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(ids)
        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())
    return sum(seen.values())


@pytest.mark.parametrize("precision,dtype", [("fp32", torch.float32), ("bf16_mixed", torch.bfloat16)])
def test_activations_match_what_autograd_saves_for_a_gpt_block(api, precision, dtype):
    """A GPT block without dropout (fused LayerNorm, multi-head attention): the itemized
    prediction should account for nearly every byte PyTorch keeps."""
    cfg = dict(n_layers=3, d_model=128, n_heads=4, vocab_size=500, max_seq_len=256)
    body = api.ok(TRAINING, {"model": cfg, "batch_size": 2, "seq_len": 256, "precision": precision,
                                "recompute": "none"})  # autograd keeps every activation
    measured = saved_activation_bytes(cfg, 2, 256, dtype)
    assert body["activations"] == pytest.approx(measured, rel=0.02)


def test_pipeline_and_tensor_parallel_split_the_model(api):
    whole = api.ok(TRAINING, {"model": "llama2-7b", "seq_len": 4096})
    assert whole["params_per_gpu"] == whole["params"] == 6_738_415_616
    split = api.ok(TRAINING, {"model": "llama2-7b", "seq_len": 4096, "tensor_parallel": 4,
                              "pipeline_parallel": 4})
    # The first of 4 stages: the token embedding and blocks 0-7. Megatron splits every
    # linear weight and the vocabulary over the 4 tensor ranks and replicates the norms.
    ref = lm_from_config(whole_cfg := api.get("/api/v1/models/llama2-7b").json()["config"])
    blocks = ref.blocks[: whole_cfg["n_layers"] // 4]
    linear = sum(m.weight.numel() for b in blocks for m in b.modules() if isinstance(m, torch.nn.Linear))
    norms = sum(m.weight.numel() for b in blocks for m in b.modules() if isinstance(m, torch.nn.RMSNorm))
    assert split["params_per_gpu"] == (ref.tok.weight.numel() + linear) // 4 + norms
    # 1F1B: the first stage holds pipeline_parallel micro-batches of its layers, i.e. all
    # layers' worth (Korthikanti et al. section 4.2.3).
    assert split["pipeline_stage"] == "first"
    assert split["activation_detail"]["layers_held"] == 32


def test_fits_and_headroom(api):
    small = api.ok(TRAINING, {"model": "gpt2", "batch_size": 8, "gpu": "h100-sxm"})
    assert small["fits"] is True and small["headroom"] == H100_REPORTED_BYTES - small["total"]
    big = api.ok(TRAINING, {"model": "llama2-70b", "seq_len": 4096, "gpu": "h100-sxm"})
    assert big["fits"] is False and big["headroom"] < 0
    roomy = api.ok(TRAINING, {"model": "llama2-70b", "seq_len": 4096, "gpu": "h100-sxm",
                              "gpu_overrides": {"memory_bytes": 10**15}})
    assert roomy["fits"] is True and roomy["gpu_memory_bytes"] == 10**15


def test_checkpoint_holds_parameters_master_weights_and_optimizer_state(api):
    body = api.ok(TRAINING, {"model": 1e9, "precision": "bf16_mixed", "optimizer": "adamw"})
    assert body["checkpoint_bytes"] == 1e9 * (2 + 4 + 8)
    sgd = api.ok(TRAINING, {"model": 1e9, "precision": "fp32", "optimizer": "sgd"})
    assert sgd["checkpoint_bytes"] == 4e9 and sgd["bytes_per_param"] == 8


def test_optimizer_states(api):
    per = {opt: api.ok(TRAINING, {"model": 1e6, "precision": "fp32", "optimizer": opt})["bytes_per_param"]
           for opt in ("sgd", "sgd_momentum", "adagrad", "rmsprop", "adam", "adamw", "adamw_8bit")}
    # fp32 parameters and gradients (8) plus 0, 1 or 2 fp32 states; 8-bit AdamW keeps two
    # 1-byte states plus an fp32 absmax per 2048-element block (Dettmers et al. 2022).
    assert per == {"sgd": 8, "sgd_momentum": 12, "adagrad": 12, "rmsprop": 12, "adam": 16,
                   "adamw": 16, "adamw_8bit": 8 + 2 * (1 + 4 / 2048)}
    # torch's optimizers agree on the state count.
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    for name, opt in (("sgd_momentum", torch.optim.SGD([p], lr=0.1, momentum=0.9)),
                      ("adagrad", torch.optim.Adagrad([p])), ("rmsprop", torch.optim.RMSprop([p])),
                      ("adamw", torch.optim.AdamW([p]))):
        opt.step()
        tensors = [v for v in opt.state[p].values() if torch.is_tensor(v) and v.numel() == 3]
        assert len(tensors) == memory.OPTIMIZER_STATES[name], name


def test_memory_rejections_name_their_field(api):
    assert_names_field(api.post(TRAINING, {"model": "llama2-70b", "tensor_parallel": 3}), "tensor_parallel")
    assert_names_field(api.post(TRAINING, {"model": "gpt2", "pipeline_parallel": 13}), "pipeline_parallel")
    assert_names_field(api.post(TRAINING, {"model": "gpt2", "seq_len": 4096}), "seq_len")
    orphan = {"model": 1e9, "gpu_overrides": {"memory_bytes": 5}}
    assert_names_field(api.post(TRAINING, orphan), "gpu_overrides")
    assert_names_field(api.post(TRAINING, {"model": True}), "model")
    assert_names_field(api.post(TRAINING, {"model": 0}), "model")
    assert_names_field(api.post(TRAINING, {"model": "gpt2", "zero_stage": 4}), "zero_stage")
    assert_names_field(api.post("/api/v1/memory/max-model", {"gpu": "h100"}), "gpu")


def test_byte_counts_stay_exact_at_the_largest_parameter_count(api):
    body = api.ok(TRAINING, {"model": 10**14, "precision": "fp32", "optimizer": "adamw_8bit"})
    n = 10**14
    assert body["parameters"] == 4 * n and body["gradients"] == 4 * n
    assert body["optimizer_state"] == 2 * n + n // 1024 * 4  # 2 one-byte states + fp32 absmax per 2048
    assert_names_field(api.post(TRAINING, {"model": 10**14 + 1}), "model")


GQA = {"n_layers": 2, "d_model": 512, "n_heads": 8, "n_kv_heads": 2, "vocab_size": 1000, "mlp": "swiglu",
       "norm": "rmsnorm", "bias": False, "tied_embeddings": False, "position": "rope", "d_ff": 1024}


@pytest.mark.parametrize("tp", [4, 8])
def test_tensor_ranks_past_the_kv_heads_replicate_them(api, tp):
    """As Megatron-LM and vLLM's QKVParallelLinear do: with more tensor ranks than key/value
    heads each rank keeps one whole K/V head (tp / n_kv_heads copies of each), while every
    other matrix splits over tp. Counted from transformers' Llama on the meta device."""
    from transformers import LlamaConfig, LlamaForCausalLM
    hf = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                     num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(hf)
    expected = 0
    for name, p in model.named_parameters():
        if "norm" in name:
            expected += p.numel()
        elif "k_proj" in name or "v_proj" in name:
            expected += p.numel() // 2  # one of the 2 heads
        else:
            expected += p.numel() // tp
    s, head_dim = 512, 64
    body = api.ok(TRAINING, {"model": GQA, "seq_len": s, "tensor_parallel": tp, "precision": "bf16_mixed"})
    assert body["params_per_gpu"] == expected
    layer = body["activation_detail"]["per_layer"]
    # 8 / tp query heads and one K/V head per rank, 2 bytes each (sequence parallel or not).
    assert layer["attention/q_and_k"] == 2 * s * (8 // tp + 1) * head_dim
    assert layer["attention/v"] == 2 * s * head_dim
    assert any("replica of one key/value head" in note for note in body["assumptions"])


def test_tensor_parallel_must_divide_the_kv_heads_or_be_a_multiple(api):
    model = GQA | {"n_heads": 24, "n_kv_heads": 6, "d_model": 768}
    assert_names_field(api.post(TRAINING, {"model": model, "tensor_parallel": 4}), "tensor_parallel")
    assert_names_field(api.post(TRAINING, {"model": GQA | {"n_heads": 12, "n_kv_heads": 4, "d_model": 768},
                                           "tensor_parallel": 6}), "tensor_parallel")
    api.ok(TRAINING, {"model": model, "tensor_parallel": 12})  # 6 heads, each kept by 2 ranks
