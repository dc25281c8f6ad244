"""A fine-tuning step's FLOPs, exact against FlopCounterMode on peft's own wrapping of transformers'
models: forward, and backward through frozen weights (input gradients only, and only where an
input requires one) and the adapters. Eager attention; mixture-of-experts models on the CPU with
eager experts (routing needs real numbers), the rest on the meta device."""

import pytest
import torch
from peft import get_peft_model
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.finetune.flops import step_flops
from app.accounting.finetune.lora import HF_NAMES
from app.accounting.finetune.spec import FineTune
from app.accounting.hf.read import import_config
from tests.support.conv_flops import depthwise_excess
from tests.support.hf_configs_hybrid import SMALL as HYBRID_SMALL
from tests.support.hf_configs_moe import SMALL as MOE_SMALL
from tests.support.hf_oracle import one_thread
from tests.support.lora import FAMILIES, FUSED, lora_config

MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "glm4_moe"}
HYBRIDS = {"bamba", "jamba", "nemotron_h", "qwen3_next", "falcon_h1"}
"""Built on the CPU too: their scans and routers need real numbers."""
TARGET_SETS = [("q", "v"), ("v",), ("k", "o"), ("q", "k", "v", "o", "gate", "up", "down"), ("down",),
               ("up",)]


def counted(config: dict, rank: int, targets: tuple[str, ...] | None, batch: int, seq: int, *,
            saved: tuple[str, ...] = (), frozen: tuple[str, ...] | None = None,
            names: dict[str, str] = HF_NAMES) -> tuple[int, int]:
    """Forward and backward FLOPs of peft's LoRA (targets, modules_to_save=saved) or, with
    `frozen` (module paths), of the model with those parts' requires_grad off."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    moe = config["model_type"] in MOE | HYBRIDS
    with one_thread():
        torch.manual_seed(0)
        with torch.device("cpu" if moe else "meta"):
            extra = {"experts_implementation": "eager"} if moe else {}
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)
        if frozen is None:
            wrapped = get_peft_model(model, lora_config(rank, targets, saved, names))
        else:
            wrapped = model
            for path in frozen:
                model.get_submodule(path).requires_grad_(False)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cpu" if moe else "meta")
        with FlopCounterMode(display=False) as forward:
            logits = wrapped(input_ids=ids).logits
        with FlopCounterMode(display=False) as backward:
            logits.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


# Mixtral's MLPs are all routed experts, fused 3-D parameters no target name matches (the refusal
# is test_lora_peft's): it takes the attention target sets only.
CASES = [(name, targets) for name in FAMILIES for targets in TARGET_SETS
         if not (name == "mixtral" and set(targets) & {"gate", "up", "down"})]


@pytest.mark.parametrize("rank", [4, 8])
@pytest.mark.parametrize(("name", "targets"), CASES, ids=[f"{n}-{'-'.join(t)}" for n, t in CASES])
def test_lora_step_flops_match_flop_counter_mode(name, targets, rank):
    cfg = import_config(FAMILIES[name]).config
    ours = step_flops(cfg, FineTune("lora", rank=rank, targets=targets), batch_size=2, seq_len=24)
    forward, backward = counted(FAMILIES[name], rank, targets, 2, 24)
    assert (ours.forward, ours.backward) == (forward, backward)
    assert ours.backward < 2 * ours.forward  # frozen weights skip their weight gradients


@pytest.mark.parametrize("saved", [("lm_head",), ("embed_tokens",), ("embed_tokens", "lm_head")])
@pytest.mark.parametrize("name", ["llama", "qwen2_moe"])
def test_lora_with_modules_to_save_matches_flop_counter_mode(name, saved):
    """A trained head adds its weight gradient; a trained embedding makes every layer's input
    require a gradient from the start."""
    cfg = import_config(FAMILIES[name]).config
    spec = FineTune("lora", rank=4, targets=("v",), train_embeddings="embed_tokens" in saved,
                    train_head="lm_head" in saved)
    ours = step_flops(cfg, spec, batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 4, ("v",), 2, 24, saved=saved)


# Nemotron-H's MLPs have no gate (up and down alone); its attention layers and Mamba-2 layers have no MLP.
HYBRID_CASES = [(name, targets) for name in sorted(HYBRIDS)
                for targets in [("q", "v"), ("k", "o"),
                                ("q", "k", "v", "o") + (("up", "down") if name == "nemotron_h"
                                                        else ("gate", "up", "down"))]]


@pytest.mark.parametrize(("name", "targets"), HYBRID_CASES,
                         ids=[f"{n}-{'-'.join(t)}" for n, t in HYBRID_CASES])
def test_lora_on_a_hybrid_passes_gradients_through_its_frozen_mixers(name, targets):
    """Adapters on the attention and MLP layers of a hybrid: its Mamba, Mamba-2 and gated DeltaNet
    layers stay frozen, and pass an input gradient through their projections and scans (no
    convolution weight gradient) only behind the first adapter."""
    config = HYBRID_SMALL[name]
    cfg = import_config(config).config
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=37)
    assert (ours.forward, ours.backward) == counted(config, 4, targets, 2, 37)


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_freezing_a_hybrids_first_layers_matches_flop_counter_mode(name, layers):
    """Frozen first layers behind a frozen embedding pass no gradient; the trained ones train their
    mixers whole (FlopCounterMode counting each trained convolution's weight gradient densely)."""
    config = HYBRID_SMALL[name]
    cfg = import_config(config).config
    spec = FineTune("freeze", freeze_embeddings=True, freeze_layers=layers)
    ours = step_flops(cfg, spec, batch_size=2, seq_len=37)
    embedding = "model.embeddings" if name == "nemotron_h" else "model.embed_tokens"
    frozen = tuple(f"model.layers.{i}" for i in range(layers)) + (embedding,)
    forward, backward = counted(config, 0, (), 2, 37, frozen=frozen)
    excess = depthwise_excess(cfg, 2, 37, layers=range(layers, cfg.n_layers))
    assert (ours.forward, ours.backward + excess) == (forward, backward)


FREEZES = [(True, True, 0), (True, True, 1), (False, False, 1), (True, False, 2), (False, True, 0)]


@pytest.mark.parametrize(("embeddings", "head", "layers"), FREEZES)
@pytest.mark.parametrize("name", ["llama", "gemma2", "qwen2_moe"])
def test_frozen_parts_match_flop_counter_mode(name, embeddings, head, layers):
    """Frozen weights skip their weight gradients; frozen layers ahead of any trained one, with
    the embedding frozen, skip their input gradients too."""
    cfg = import_config(FAMILIES[name]).config
    if cfg.tied_embeddings and embeddings != head:
        return  # refused, naming the field (test_freeze)
    frozen = [f"model.layers.{i}" for i in range(layers)]
    frozen += ["model.embed_tokens"] * embeddings + ["lm_head"] * head
    spec = FineTune("freeze", freeze_embeddings=embeddings, freeze_head=head, freeze_layers=layers)
    ours = step_flops(cfg, spec, batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 0, (), 2, 24, frozen=tuple(frozen))


@pytest.mark.parametrize("name", ["llama", "mixtral"])
def test_full_fine_tune_is_three_forwards(name):
    cfg = import_config(FAMILIES[name]).config
    ours = step_flops(cfg, FineTune("full"), batch_size=2, seq_len=24)
    nothing_frozen = step_flops(cfg, FineTune("freeze"), batch_size=2, seq_len=24)
    assert ours.total == nothing_frozen.total == 3 * ours.forward
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 0, (), 2, 24, frozen=())


EXPERT_SETS = [("experts_gate_up",), ("experts_down",), ("experts_gate_up", "experts_down"),
               ("v", "experts_down"), ("q", "gate", "experts_gate_up")]


@pytest.mark.parametrize("targets", EXPERT_SETS, ids="-".join)
@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_expert_adapters_match_flop_counter_mode(name, targets):
    """peft folds expert adapters into the 3-D weights: the merge forward, the merged weight's
    gradient like a trained expert's, and dA, dB from it."""
    if name == "mixtral" and "gate" in targets:
        return  # every Mixtral MLP is routed: no gate_proj (refused, test_lora_peft)
    cfg = import_config(FAMILIES[name]).config
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 4, targets, 2, 24)


@pytest.mark.parametrize("every", [False, True], ids=["default", "every-matrix"])
@pytest.mark.parametrize("name", ["gpt2", "phi3"])
def test_fused_projections_match_flop_counter_mode(name, every):
    """One adapter over GPT-2's c_attn (a Conv1D) or Phi-3's qkv_proj and gate_up_proj."""
    config, names = FUSED[name]
    targets = tuple(names) if every else None
    cfg = import_config(config).config
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=24)
    theirs = ("qkv",) if name == "phi3" and not every else targets  # peft has no phi3 default
    assert (ours.forward, ours.backward) == counted(config, 4, theirs, 2, 24, names=names)


QWEN3_MOE = MOE_SMALL["qwen3_moe"]  # layers 0 and 2 dense, 1 and 3 routed
QWEN3_SETS = [("q", "k", "v", "o", "gate", "up", "down"), ("gate", "up"), ("down",), ("v", "down"),
              ("gate", "up", "experts_gate_up"), ("experts_gate_up",)]


@pytest.mark.parametrize("targets", QWEN3_SETS, ids="-".join)
@pytest.mark.parametrize("family", ["qwen3_moe", "glm4_moe"])
def test_moe_mlp_targets_match_flop_counter_mode(family, targets):
    """peft wraps Qwen3-MoE's and GLM-4.5's gate and up as the experts' gate_up_proj, down as their
    down_proj, and leaves the dense layers' MLPs (and GLM's shared expert) frozen: the merges at
    that rank, and no adapter on a dense MLP (test_lora_peft counts the parameters)."""
    config = MOE_SMALL[family]
    cfg = import_config(config).config
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(config, 4, targets, 2, 24)


# Parallel blocks: attention and the MLP both read the layer's input. GPT-NeoX
# (use_parallel_residual) and Falcon's new decoder norm it once per branch; Falcon-7B's layout
# (parallel_attn, multi-query) once for both. GPT-NeoX with use_parallel_residual false is the
# sequential control.
NEOX, NEOX_NAMES = FUSED["gpt_neox"]
FALCON_NAMES = FUSED["falcon"][1]
PARALLEL = {
    "gpt_neox": FUSED["gpt_neox"],
    "falcon": FUSED["falcon"],
    "falcon-one-norm": ({"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "vocab_size": 100, "new_decoder_architecture": False,
                         "multi_query": True, "parallel_attn": True}, FALCON_NAMES),
    "gpt_neox-sequential": (NEOX | {"use_parallel_residual": False}, NEOX_NAMES),
}
PARALLEL_SETS = [None, ("o",), ("up",), ("down",), ("qkv", "o", "up", "down")]


@pytest.mark.parametrize("targets", PARALLEL_SETS, ids=lambda t: "default" if t is None else "-".join(t))
@pytest.mark.parametrize("name", list(PARALLEL))
def test_parallel_blocks_match_flop_counter_mode(name, targets):
    """Behind a frozen embedding, the first layer's MLP reads a norm of that embedding, not of
    x + attention(x): adapters on attention leave its input without a gradient, and up and down
    skip their input gradients until an MLP adapter."""
    config, names = PARALLEL[name]
    cfg = import_config(config).config
    assert (cfg.norm_layout == "pre") == name.endswith("sequential")
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(config, 4, targets, 2, 24, names=names)


# EleutherAI/pythia-1.4b config.json.
PYTHIA_1_4B = {"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
               "hidden_act": "gelu", "hidden_size": 2048, "initializer_range": 0.02,
               "intermediate_size": 8192, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
               "model_type": "gpt_neox", "num_attention_heads": 16, "num_hidden_layers": 24,
               "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
               "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
               "use_parallel_residual": True, "vocab_size": 50304}


def test_pythia_1_4b_lora_backward_skips_the_first_mlp_s_input_gradients():
    """peft's default (query_key_value) at r = 8, one sequence of 128 tokens, on the meta device:
    331,043,831,808 backward FLOPs, 4 t d f = 8,589,934,592 fewer than the sequential rule gives."""
    cfg = import_config(PYTHIA_1_4B).config
    ours = step_flops(cfg, FineTune("lora", rank=8), batch_size=1, seq_len=128)
    theirs = counted(PYTHIA_1_4B, 8, None, 1, 128)
    assert (ours.forward, ours.backward) == theirs
    assert theirs[1] == 331_043_831_808


@pytest.mark.parametrize(("embeddings", "head", "layers"), FREEZES)
def test_frozen_parts_of_parallel_blocks_match_flop_counter_mode(embeddings, head, layers):
    """Freezing: a trained layer's LayerNorm weights make both branches' inputs require gradients."""
    cfg = import_config(NEOX).config
    frozen = [f"gpt_neox.layers.{i}" for i in range(layers)]
    frozen += ["gpt_neox.embed_in"] * embeddings + ["lm_head"] * head
    spec = FineTune("freeze", freeze_embeddings=embeddings, freeze_head=head, freeze_layers=layers)
    ours = step_flops(cfg, spec, batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(NEOX, 0, (), 2, 24, frozen=tuple(frozen))
