"""The train_step probe fine-tunes as peft and bitsandbytes do (app/bench/lora.py), on CPU at
small sizes: parts frozen, LoRA adapters, a base stored in NF4 or INT8. Its measured peak
(live tensor bytes, op by op) is what finetune_memory predicts, its trainable parameters are the
engine's count, its FLOPs are FlopCounterMode's, and its adapters compute what peft's do."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from app.accounting.finetune.freeze import freeze_params
from app.accounting.finetune.lora import lora_params
from app.bench import lora, train_step
from app.bench.models import Transformer, blocks
from app.probes.train_step import predict
from app.probes.train_step.params import TrainStepParams
from tests.support import ROOT
from tests.support.api import assert_names_field

QUICK = {"warmup_s": 0.01, "measure_s": 0.01, "min_iters": 3, "max_iters": 5}
LLAMA = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "mlp": "swiglu",
         "norm": "rmsnorm", "position": "rope", "bias": False, "tied_embeddings": False}
MODELS = {
    "llama": LLAMA,
    # Qwen2-MoE's layout: a dense first layer, then a gated shared expert beside top-2 of 8 routed
    # ones; MLP targets adapt the dense MLP and the shared experts, never the routed experts.
    "qwen2-moe": LLAMA | {"n_layers": 3, "n_experts": 8, "top_k": 2, "d_ff_expert": 32, "n_shared_experts": 1,
                          "d_ff_shared": 64, "shared_expert_gate": True, "mlp_only_layers": [0]},
}
GPT_TIED = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 256}
MIXTRAL = LLAMA | {"n_experts": 4, "top_k": 2, "d_ff_expert": 96}
# Phi-3's layout: q, k, v in one nn.Linear (qkv_proj) and gate and up in another (gate_up_proj).
PHI3_LIKE = LLAMA | {"fused_qkv": True, "fused_gate_up": True}
ALL = ["q", "k", "v", "o", "gate", "up", "down"]
TUNES = {
    "freeze-embeddings": {"mode": "freeze", "freeze_embeddings": True},
    "freeze-layer-and-head": {"mode": "freeze", "freeze_layers": 1, "freeze_head": True},
    "lora-qv": {"mode": "lora"},
    "lora-all": {"mode": "lora", "lora_targets": ALL},
}
QLORA = {f"qlora-{fmt}": {"mode": "qlora", "base_format": fmt}
         for fmt in ("nf4", "nf4_double_quant", "int8_channel")}
HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None


def quiet(*_):
    return None


def _cases():
    for model in MODELS:
        runs = [(p, t) for p in ("fp32", "bf16_autocast", "bf16") for t in TUNES]
        runs += [("bf16", q) for q in QLORA]  # QLoRA computes in 16 bits (finetune_memory refuses the rest)
        for precision, tune in runs:
            marks = [pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed")] \
                if tune.startswith("qlora") else []
            yield pytest.param(model, precision, tune, marks=marks, id=f"{model}-{precision}-{tune}")


def params(model: dict, **tune) -> TrainStepParams:
    return TrainStepParams.model_validate({"model": model, "batch_size": 2, "seq_len": 32} | tune)


def engine_trainable(p: TrainStepParams) -> int:
    """The engine's own count of what the fine-tune trains."""
    cfg = predict.train_step(p, False).config
    if p.mode == "freeze":
        return freeze_params(cfg, freeze_embeddings=p.freeze_embeddings, freeze_head=p.freeze_head,
                             freeze_layers=p.freeze_layers).trainable_params
    targets = None if p.lora_targets is None else tuple(p.lora_targets)  # None: the family's default
    return lora_params(cfg, rank=p.lora_rank, targets=targets).trainable_params


# The hybrids: their Mamba-2 and gated DeltaNet layers stay frozen under LoRA (no target names them)
# and pass the gradient through; Nemotron-H's layers hold a mixer or an MLP, not both.
MAMBA2 = {"ssm_heads": 8, "ssm_head_dim": 16, "ssm_groups": 2, "ssm_state_size": 16, "ssm_chunk_size": 24}
HYBRIDS = {
    "bamba": LLAMA | {"n_layers": 3, "layer_mixers": ["mamba2", "attention", "mamba2"], **MAMBA2},
    "nemotron-h": LLAMA | {"n_layers": 4, "layer_mixers": ["mamba2", "none", "attention", "none"],
                           "mlp_free_layers": [0, 2], "mlp": "relu2", **MAMBA2},
    "qwen3-next": LLAMA | {"n_layers": 3, "layer_mixers": ["gated_delta_net", "attention", "gated_delta_net"],
                           "linear_key_heads": 2, "linear_value_heads": 4, "linear_key_head_dim": 16,
                           "linear_value_head_dim": 16, "attn_output_gate": True, "qk_norm": "head"},
    "falcon-h1": LLAMA | {"layer_mixers": ["attention_mamba2"] * 2, "ssm_norm": False, "ssm_out_bias": True,
                          **MAMBA2},
}
HYBRID_TUNES = {"lora-qv": TUNES["lora-qv"], "lora-all": TUNES["lora-all"],
                "freeze-layer-and-head": TUNES["freeze-layer-and-head"]}


@pytest.mark.parametrize("tune", list(HYBRID_TUNES))
@pytest.mark.parametrize("model", list(HYBRIDS))
def test_fine_tuning_a_hybrid_predicts_its_peak(model, tune):
    body = HYBRID_TUNES[tune] | {"model": HYBRIDS[model], "precision": "bf16_autocast"}
    if model == "nemotron-h" and tune == "lora-all":  # its squared-ReLU MLPs have up and down only
        body["lora_targets"] = [t for t in ALL if t != "gate"]
    result = train_step.run(QUICK | {"batch_size": 4, "seq_len": 128, "optimizer": "adamw", "steps": 1,
                                     "warmup_steps": 1} | body, quiet)
    mem = result["memory"]
    assert result["trainable_params"] == engine_trainable(TrainStepParams.model_validate(body))
    assert result["loss_last"] < result["loss_first"]
    assert abs(mem["relative_error"]) < 0.05, mem


@pytest.mark.parametrize(("model", "precision", "tune"), list(_cases()))
def test_fine_tune_predicts_peak_memory_within_10_percent(model, precision, tune):
    """4 x 128 tokens, so activations are most of the peak; one measured step after one warm-up."""
    body = (TUNES.get(tune) or QLORA[tune]) | {"model": MODELS[model], "precision": precision}
    result = train_step.run(QUICK | {"batch_size": 4, "seq_len": 128, "optimizer": "adamw", "steps": 1,
                                     "warmup_steps": 1} | body, quiet)
    mem = result["memory"]
    assert result["mode"] == body["mode"]
    assert result["trainable_params"] == engine_trainable(TrainStepParams.model_validate(body))
    assert mem["predicted"]["frozen_weights"] > 0 and mem["predicted"]["activations"] > 0
    assert result["loss_last"] < result["loss_first"]
    # The issue asks for 10%; live tensor bytes on the CPU are exact, and every case sits within 1.5%.
    assert abs(mem["relative_error"]) < 0.05, mem


@pytest.mark.parametrize(("model", "tune"), [
    (LLAMA, {"mode": "lora", "lora_rank": 4, "lora_targets": ["k", "o", "down"]}),
    (MODELS["qwen2-moe"], {"mode": "lora", "lora_targets": ALL}),
    (MIXTRAL, {"mode": "lora", "lora_targets": ["q", "k", "v", "o"]}),  # every MLP is routed: attention only
    (GPT_TIED, {"mode": "lora", "lora_targets": ["q", "up"]}),  # gelu: up and down, no gate
    (GPT_TIED, {"mode": "freeze", "freeze_embeddings": True, "freeze_head": True}),  # tied: both
    (GPT_TIED, {"mode": "freeze", "freeze_layers": 2}),
    (MODELS["qwen2-moe"], {"mode": "freeze", "freeze_layers": 2, "freeze_embeddings": True}),
    (PHI3_LIKE, {"mode": "lora"}),  # peft's default for a fused projection: qkv
    (PHI3_LIKE, {"mode": "lora", "lora_targets": ["gate_up", "o"]}),
], ids=["llama-lora-k-o-down", "qwen2-moe-lora-all", "mixtral-lora-attention", "gpt-lora-q-up",
        "gpt-tied-freeze-both", "gpt-freeze-layers", "qwen2-moe-freeze-layers", "phi3-lora-default",
        "phi3-lora-gate-up"])
def test_the_probe_trains_what_the_engine_counts(model, tune):
    """requires_grad parameters of the model built, against lora_params / freeze_params; the
    optimizer holds those and no others."""
    p = params(model, **tune)
    work = train_step.workload(p, torch.device("cpu"))
    trained = lora.trainable(work.model)
    assert sum(t.numel() for t in trained) == engine_trainable(p) == work.prediction.trainable_params
    opt = train_step.optimizer("adamw", trained, torch.device("cpu"))
    assert {id(t) for group in opt.param_groups for t in group["params"]} == {id(t) for t in trained}
    if p.mode == "lora":
        names = [name for name, t in work.model.named_parameters() if t.requires_grad]
        assert all(name.split(".")[-2] in ("A", "B") for name in names)
    if p.freeze_layers:
        assert not any(t.requires_grad for t in work.model.blocks[:p.freeze_layers].parameters())


@pytest.mark.parametrize(("model", "tune"), [
    (LLAMA, {"mode": "lora"}),
    (LLAMA, {"mode": "lora", "lora_targets": ALL}),
    (LLAMA, {"mode": "freeze", "freeze_embeddings": True, "freeze_layers": 1}),
    (LLAMA, {"mode": "freeze", "freeze_head": True}),
    (MODELS["qwen2-moe"], {"mode": "lora", "lora_targets": ["q", "o", "gate", "down"]}),
    (GPT_TIED, {"mode": "lora", "lora_targets": ["k", "up"]}),
    (PHI3_LIKE, {"mode": "lora", "lora_targets": ["qkv", "gate_up"]}),
], ids=["llama-lora-qv", "llama-lora-all", "llama-freeze-embeddings-layer", "llama-freeze-head",
        "qwen2-moe-lora", "gpt-lora-k-up", "phi3-lora-fused"])
def test_fine_tune_flops_match_torch(model, tune):
    """FlopCounterMode counts the step the probe runs (attention through the math kernel): the
    frozen weights' skipped gradients, and no input gradient before the first adapter, where an
    unadapted block of a fused projection needs none (as peft's separate k_proj)."""
    p = params(model, **tune)
    work = train_step.workload(p, torch.device("cpu"))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        work.loss().backward()
    assert work.prediction.flops_per_step == counter.get_total_flops()


@pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed")
def test_qlora_flops_are_torchs_plus_the_quantized_forwards():
    """FlopCounterMode has no formula for bitsandbytes' fused 4-bit matmul, which runs each frozen
    matrix's forward; backward dequantizes and runs torch.matmul, which it counts."""
    p = params(LLAMA, mode="qlora", precision="bf16", base_format="nf4")
    work = train_step.workload(p, torch.device("cpu"))
    import bitsandbytes as bnb

    tokens = p.batch_size * p.seq_len
    hidden = sum(2 * tokens * m.in_features * m.out_features for m in work.model.modules()
                 if isinstance(m, bnb.nn.Linear4bit))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        work.loss().backward()
    assert hidden > 0 and work.prediction.flops_per_step == counter.get_total_flops() + hidden


def test_adapters_on_the_fused_qkv_compute_what_peft_computes_on_separate_projections():
    """peft wraps separate q_proj, k_proj, v_proj cut from the probe's fused matrix; with the
    same A and B, the blocks and the input's gradient agree."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = Transformer(predict.train_step(params(LLAMA), False).config)
    lora.adapt(model, ["q", "v"], 8)
    adapted = model.blocks[0].attn.qkv
    assert all(not a.B.weight.any() for a in adapted.adapters.values())  # the base, to start
    for a in adapted.adapters.values():
        nn.init.normal_(a.B.weight)
    widths = tuple(adapted.blocks.values())

    class Separate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            weights = adapted.base.weight.detach().split(widths)
            for name, w in zip(("q_proj", "k_proj", "v_proj"), weights, strict=True):
                setattr(self, name, nn.Linear(w.shape[1], w.shape[0], bias=False))
                getattr(self, name).weight.data.copy_(w)

    config = peft.LoraConfig(r=8, lora_alpha=lora.LORA_ALPHA, lora_dropout=0.0,
                             target_modules=["q_proj", "v_proj"])
    wrapped = peft.get_peft_model(Separate(), config)
    for target in ("q", "v"):
        layer = getattr(wrapped.base_model.model, f"{target}_proj")
        layer.lora_A["default"].weight.data.copy_(adapted.adapters[target].A.weight)
        layer.lora_B["default"].weight.data.copy_(adapted.adapters[target].B.weight)
        assert layer.scaling["default"] == adapted.adapters[target].scaling
    x = torch.randn(2, 5, 64, requires_grad=True)
    ours = blocks(adapted, x, widths)
    theirs = [getattr(wrapped.base_model.model, f"{t}_proj")(x) for t in "qkv"]
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)
    assert not ours[1].requires_grad or x.requires_grad  # k unadapted: a gradient only through x
    (grad_ours,) = torch.autograd.grad(sum(t.square().sum() for t in ours), x)
    (grad_theirs,) = torch.autograd.grad(sum(t.square().sum() for t in theirs), x)
    torch.testing.assert_close(grad_ours, grad_theirs)


JOBS = "/api/v1/jobs"
MLA = LLAMA | {"kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


@pytest.mark.parametrize(("params_", "field"), [
    ({"model": {"kind": "cruncher", "dim": 16, "num_layers": 1}, "mode": "lora"}, "params.mode"),
    ({"model": {"kind": "cruncher", "dim": 16, "num_layers": 1}, "precision": "bf16"}, "params.precision"),
    ({"model": LLAMA, "mode": "lora", "lora_targets": ["q", "q"]}, "params.lora_targets"),
    ({"model": LLAMA, "mode": "lora", "lora_rank": 0}, "params.lora_rank"),
    ({"model": LLAMA, "mode": "tune"}, "params.mode"),
    ({"model": LLAMA, "mode": "qlora", "base_format": "fp8"}, "params.base_format"),
    ({"model": LLAMA, "mode": "freeze", "freeze_layers": 3}, "params.freeze_layers"),
    ({"model": GPT_TIED, "mode": "freeze", "freeze_head": True}, "params.freeze_embeddings"),
    ({"model": GPT_TIED, "mode": "lora", "lora_targets": ["q", "gate"]}, "params.lora_targets.1"),
    ({"model": MIXTRAL, "mode": "lora", "lora_targets": ["up"]}, "params.lora_targets.0"),
    ({"model": LLAMA, "mode": "lora", "freeze_head": True}, "params.mode"),
    ({"model": MLA, "mode": "lora", "lora_targets": ["o"]}, "params.model"),
    ({"model": LLAMA, "mode": "qlora", "precision": "fp32"}, "params.precision"),
    ({"model": PHI3_LIKE, "mode": "lora", "lora_targets": ["o", "q"]}, "params.lora_targets.1"),
    ({"model": MIXTRAL, "mode": "lora", "lora_targets": ["q", "experts_down"]}, "params.lora_targets.1"),
], ids=["cruncher-lora", "cruncher-bf16", "target-twice", "rank-0", "unknown-mode", "unknown-format",
        "too-many-layers", "tied-head-alone", "gelu-gate", "routed-up", "lora-freezes", "latent",
        "qlora-fp32", "fused-q", "expert-adapters"])
def test_fine_tune_refusals_name_the_parameter(make_api, params_, field):
    api = make_api()
    assert_names_field(api.post(JOBS, {"probe": "train_step", "params": params_}), field)
    assert api.get(JOBS).json()["count"] == 0


def test_qlora_without_bitsandbytes_is_refused_before_it_runs(tmp_path):
    """A Python whose site-packages lack bitsandbytes (the rest linked in): the server's check
    (find_spec, no import) refuses the job naming params.mode, and so does the child."""
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and (Path(p) / "torch").is_dir())
    for entry in site.iterdir():
        if not entry.name.startswith("bitsandbytes"):
            (tmp_path / entry.name).symlink_to(entry)
    root = ROOT
    script = (
        "import importlib.util, json\n"
        "from app.accounting.errors import InvalidInput\n"
        "from app.bench import train_step\n"
        "assert importlib.util.find_spec('bitsandbytes') is None\n"
        f"body = {{'model': {LLAMA!r}, 'mode': 'qlora', 'precision': 'bf16', 'seq_len': 8}}\n"
        "try:\n"
        "    train_step.run(body, lambda *a: None)\n"
        "except InvalidInput as e:\n"
        "    print(json.dumps([e.field, e.message]))\n")
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{tmp_path}"}
    done = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True, env=env,
                          timeout=120, cwd=root)
    assert done.returncode == 0, done.stderr
    field, message = json.loads(done.stdout.strip().splitlines()[-1])
    assert field == "params.mode" and "bitsandbytes" in message
