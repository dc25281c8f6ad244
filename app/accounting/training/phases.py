"""The peak of one training step, which is not one sum: different tensors are alive at
different moments. The moments that can hold the peak, each as live bytes:

- start of backward: model states, inputs, every activation, and the loss's gradients;
- the LM head's weight gradient (vocab x d, fp32), made while every activation and the
  logits' gradient are still held; with tied embeddings autograd keeps it until the
  embedding's own gradient arrives at the very end of backward, and adds the two into a
  third tensor before accumulating;
- the optimizer step: model states plus its temporaries (autocast's copies are gone).

Checked against live tensor bytes op by op and torch.cuda.max_memory_allocated by
app/bench/train_step.py (tests/test_probes.py).
"""

# Model-sized temporaries one optimizer step makes, in units of the largest parameter
# tensor: the per-tensor (foreach=False) loops allocate sqrt(v) and its quotient for Adam,
# sqrt(sum) for Adagrad, one tensor at a time. Fused Adam allocates none.
STEP_TEMPORARIES = {"sgd": 0, "adagrad": 1, "adam": 2, "adamw": 2}
FP32_BYTES = 4
# Held from the step's start to its end; frozen_weights only in a fine-tune (finetune/memory.py).
STATES = ("parameters", "gradients", "optimizer_state", "master_weights", "frozen_weights", "inputs")


def activation_gradients(tokens: int, width: int, act_bytes: int) -> int:
    """A stack of layers starts backward with two activation gradients in flight:
    dL/d(output) and dL/d(input), tokens x width each."""
    return 2 * tokens * width * act_bytes


def lm_head_phases(parts: dict[str, int], *, vocab_size: int, d_model: int, tied: bool) -> dict[str, int]:
    """Live bytes at the LM head's weight gradient and at the end of backward."""
    head_grad = FP32_BYTES * vocab_size * d_model
    states = sum(parts.get(k, 0) for k in STATES)
    held = parts["weight_copies"] + parts["activations"] + parts["transient"] // 2  # logits' gradient
    return {"lm_head_weight_gradient": states + held + head_grad,
            "end_of_backward": states + (3 if tied else 1) * head_grad}


def step_peak(parts: dict[str, int], *, largest_param: int, optimizer: str, fused: bool,
              later: dict[str, int] | None = None) -> dict[str, int]:
    """`parts` (bytes by kind: parameters, gradients, optimizer_state, master_weights,
    weight_copies, activations, transient, inputs, and a fine-tune's frozen_weights) with the
    optimizer's temporaries, the live bytes at each moment that can be the peak, and `total`,
    the largest of them.
    largest_param is in elements (fp32 master parameters); `later` adds lm_head_phases."""
    temporaries = 0 if fused else STEP_TEMPORARIES[optimizer] * largest_param * FP32_BYTES
    phases = {"start_of_backward": sum(parts.values()), **(later or {}),
              "optimizer_step": sum(parts.get(k, 0) for k in STATES) + temporaries}
    return parts | {"optimizer_temporaries": temporaries} | phases | {"total": max(phases.values())}
