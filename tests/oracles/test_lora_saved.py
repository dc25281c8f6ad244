"""What a LoRA step keeps for backward in the MLPs of parallel blocks (GPT-NeoX, Falcon), against
the tensors autograd itself saves in peft's wrapping of transformers' models: every storage a
saved-tensors hook sees, parameters aside, counted once, in the MLP where it is first saved.

Attention is left out: transformers' eager attention keeps its s x s probabilities, which the
engine (after SDPA and FlashAttention) does not, so only the MLPs compare exactly."""

import pytest
import torch
from peft import get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.finetune import spec as ft
from app.accounting.finetune.activations import saved
from app.accounting.hf.read import import_config
from tests.oracles.test_lora_flops import PARALLEL, PARALLEL_SETS
from tests.support.hf_oracle import one_thread
from tests.support.lora import lora_config

BATCH, SEQ, RANK = 2, 24, 4
MLP_ITEMS = ("mlp/", "lora/up_A_output", "lora/down_A_output")


def kept_by_mlps(config: dict, targets: tuple[str, ...] | None, names: dict[str, str]) -> int:
    """Bytes of the distinct non-parameter storages autograd saves while a layer's MLP runs (fp32, CPU)."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with one_thread():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        wrapped = get_peft_model(model, lora_config(RANK, targets, (), names))
        params = {p.untyped_storage().data_ptr() for p in wrapped.parameters()}
        inside: list[str] = []
        for name, module in wrapped.named_modules():
            if name.endswith(".mlp"):
                module.register_forward_pre_hook(lambda m, args, n=name: inside.append(n))
                module.register_forward_hook(lambda m, args, out: None if inside.pop() else None)
        first: dict[int, tuple[bool, int]] = {}  # storage -> (first saved inside an MLP, bytes)

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                first.setdefault(storage.data_ptr(), (bool(inside), storage.nbytes()))
            return t

        ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            wrapped(input_ids=ids)
    return sum(size for in_mlp, size in first.values() if in_mlp)


@pytest.mark.parametrize("targets", PARALLEL_SETS, ids=lambda t: "default" if t is None else "-".join(t))
@pytest.mark.parametrize("name", list(PARALLEL))
def test_parallel_blocks_mlps_keep_what_autograd_keeps(name, targets):
    """Behind a frozen embedding, the first layer's MLP keeps nothing while only attention carries
    adapters (its input is a norm of the embedding); with one norm for both branches and an adapter
    on up alone, the MLP keeps that norm's output itself."""
    config, names = PARALLEL[name]
    cfg = import_config(config).config
    plan = ft.graph(cfg, ft.FineTune("lora", rank=RANK, targets=targets))
    ours = saved(cfg, plan, rank=RANK, act_bytes=4, residual_bytes=4, recompute="selective", seq_len=SEQ,
                 batch_size=BATCH, weight_bytes=4)
    # the MLP's own items; the norm before it is transformers' module beside the MLP, not in it
    mlp = sum(size for item, size in ours.items() if item.startswith(MLP_ITEMS) and item != "mlp/norm_input")
    assert mlp == kept_by_mlps(config, targets, names)
