"""A recipe's flags over its stack (finetune/stacks.py, Options), and the stacks' freed gradients:
each against a hand calculation, and the gradients' lifetime against the bytes torch holds."""

import math

import pytest
import torch

from app.accounting import models
from app.accounting.errors import InvalidInput
from app.accounting.finetune import stacks
from app.accounting.finetune.memory import finetune_memory, largest_trainable
from app.accounting.finetune.spec import FineTune
from app.bench.livebytes import LiveBytes
from tests.support.api import assert_names_field

LLAMA3_8B = models.preset("llama3-8b")
V, D = 128_256, 4_096
FINETUNE = "/api/v1/finetune"


def _mem(stack: str = "torchtune", spec: FineTune = FineTune("lora"), *, seq_len: int = 1024,
         recompute: str = "selective", precision: str = "bf16_mixed", optimizer: str = "adamw",
         paged: bool = False, **flags):
    return finetune_memory(LLAMA3_8B, spec, precision=precision, optimizer=optimizer, batch_size=1,
                           seq_len=seq_len, recompute=recompute, stack=stack, paged_optimizer=paged,
                           options=stacks.Options(**flags))


def test_loss_chunks_replaces_the_stacks_count():
    s = 1000
    one, three = _mem(seq_len=s, loss_chunks=1), _mem(seq_len=s, loss_chunks=3)
    assert (one.loss_chunks, three.loss_chunks) == (1, 3)
    assert one.transient == 8 * s * V  # both fp32 gradients of the whole sequence at once
    assert three.transient == 8 * math.ceil(s / 3) * V
    assert any("loss_chunks 3" in a for a in three.assumptions)


def test_a_compiled_loss_keeps_16_bit_logits():
    """test_finetune_stacks.py measures it: eager 4 bytes a token a vocabulary entry, compiled 2."""
    s = 1024
    eager, compiled = _mem(seq_len=s), _mem(seq_len=s, torch_compile=True)
    assert eager.activation_items["head/logits_fp32"] == 4 * s * V
    assert compiled.activation_items["head/logits_fp32"] == 2 * s * V
    assert eager.transient == compiled.transient  # the backward's gradients are counted as eager's
    # Unsloth's loss is compiled already and keeps no logits: the flag changes nothing
    assert _mem("unsloth", torch_compile=True).total == _mem("unsloth").total


def test_activation_offload_keeps_two_checkpointed_inputs_on_the_gpu():
    s = 2048
    on, off = _mem(seq_len=s, recompute="full"), _mem(seq_len=s, recompute="full", activation_offload=True)
    layer = s * D * 2  # one layer's bf16 input
    assert on.activation_items["layer_input"] == LLAMA3_8B.n_layers * layer
    assert off.activation_items["layer_input"] == 2 * layer
    assert off.offloaded == (LLAMA3_8B.n_layers - 2) * layer
    assert on.total - off.total == off.offloaded


def test_activation_offload_without_checkpointing_is_refused_naming_it():
    with pytest.raises(InvalidInput) as refused:
        _mem(activation_offload=True)
    assert refused.value.field == "activation_offload"


def test_optimizer_in_backward_holds_one_tensors_gradient():
    """torchtune's optimizer_in_bwd: a post-accumulate-grad hook steps each parameter and frees its
    gradient, so the largest trainable tensor's gradient is all that is ever held."""
    full = FineTune("full")
    mem = _mem(spec=full, precision="bf16", optimizer="adamw", optimizer_in_backward=True)
    whole = _mem(spec=full, precision="bf16", optimizer="adamw")
    assert whole.gradients == 2 * whole.trainable_params
    assert mem.gradients == 2 * largest_trainable(LLAMA3_8B, full) == 2 * V * D  # the embedding or head
    assert mem.phases["optimizer_step"] == whole.phases["optimizer_step"] - whole.gradients + mem.gradients


def test_stacks_that_free_gradients_start_backward_without_them():
    """Full fine-tuning, no checkpointing, where the activations make the peak: hf frees the gradients
    between steps (the Trainer's model.zero_grad()), tally keeps them allocated; nothing else differs
    between the two stacks here, so the peaks differ by the gradients exactly."""
    full = FineTune("full")
    kept, freed = _mem("tally", full, seq_len=8192), _mem("hf", full, seq_len=8192)
    assert freed.peak_phase == kept.peak_phase == "start_of_backward"
    assert freed.gradients == kept.gradients == 2 * kept.trainable_params
    assert kept.total - freed.total == kept.gradients
    assert freed.phases["end_of_backward"] == kept.phases["end_of_backward"]  # whole by then


def test_torch_allocated_peak_leaves_out_a_paged_optimizers_state():
    paged = _mem(spec=FineTune("full"), precision="bf16", optimizer="adamw_8bit", paged=True)
    plain = _mem(spec=FineTune("full"), precision="bf16", optimizer="adamw_8bit")
    assert plain.torch_allocated_peak == plain.total
    assert paged.torch_allocated_peak == paged.total - paged.optimizer_state


def test_torch_frees_gradients_set_to_none_and_backward_starts_without_them():
    """The mechanism the stacks rely on, measured: after zero_grad(set_to_none=True) the next step's
    forward and the start of its backward hold no gradient, so the step's peak (here at the start
    of backward, activations dominating) is lower by every gradient's bytes than with
    set_to_none=False, which keeps them allocated as the train_step probe and Megatron-LM do."""
    torch.manual_seed(0)
    width, depth, tokens = 64, 4, 4096
    model = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
                                  for _ in range(depth))).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(tokens, width, dtype=torch.bfloat16)

    def peak(set_to_none: bool) -> int:
        model(x).float().square().mean().backward()  # gradients exist, as after any step
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        live = LiveBytes()
        for t in (*model.parameters(), x, *(p.grad for p in model.parameters() if p.grad is not None)):
            live.track(t)
        with live:
            model(x).float().square().mean().backward()
        return live.peak

    grads = sum(2 * p.numel() for p in model.parameters())
    assert peak(False) - peak(True) == grads


def test_the_api_takes_the_flags_and_names_a_bad_one(api):
    body = {"model": "llama3.2-1b", "mode": "lora", "seq_len": 2048, "stack": "torchtune",
            "recompute": "full", "loss_chunks": 4, "torch_compile": True, "activation_offload": True}
    mem = api.ok(FINETUNE, body)["memory"]
    assert mem["loss_chunks"] == 4 and mem["offloaded"] > 0 and mem["torch_allocated_peak"] == mem["total"]
    assert_names_field(api.post(FINETUNE, body | {"loss_chunks": 0}), "loss_chunks")
    assert_names_field(api.post(FINETUNE, body | {"recompute": "selective"}), "activation_offload")
    bad = body | {"optimizer_in_backward": "sometimes"}
    assert_names_field(api.post(FINETUNE, bad), "optimizer_in_backward")
