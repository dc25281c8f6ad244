"""Memory of one fine-tuning step on each GPU, item by item.

- Trainable parameters (the adapters, the saved embedding and head copies, or the unfrozen
  parts) carry the full training state of the precision and optimizer (memory.py's ZeRO
  accounting: parameter, gradient, optimizer state, master copy), sharded by ZeRO stage over
  data-parallel ranks as in training.
- Frozen weights carry none of it: one copy in the precision's parameter dtype, or, for QLoRA,
  in the quantized base format (inference/quant.py; bitsandbytes keeps the embeddings, norms and
  head in the compute dtype). ZeRO stage 3 (FSDP) shards them too, as FSDP-QLoRA does.
- Activations are what autograd keeps (finetune/activations.py).
- Transients at the start of backward: the loss's gradients (as in training: two fp32 ones) and,
  for QLoRA, the one matrix dequantized to the compute dtype for the matmul running.
- The stack (finetune/stacks.py) decides what the loss keeps of the logits and in which chunks,
  whether checkpointed layer inputs leave for host memory, peft's fp32 upcast under QLoRA, and
  whether a rerun checkpointed layer is a phase of its own; "tally" is the rule above.

Mode full is the training calculator's answer itself (memory.training_memory), not a second copy,
with the stack's loss and offload in place of the calculator's (tally: unchanged).
"""

import math
from dataclasses import dataclass

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.finetune import activations as saved
from app.accounting.finetune import spec as ft
from app.accounting.finetune import stacks
from app.accounting.finetune.flops import frozen_weights_in_backward
from app.accounting.finetune.freeze import freeze_params
from app.accounting.finetune.lora import lora_params, wrapped
from app.accounting.hardware import Accelerator, memory_note
from app.accounting.inference.formats import DEFAULT_KEEP
from app.accounting.inference.quant import weight_bytes
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training import phases
from app.accounting.training.memory import (
    PRECISIONS,
    Optimizer,
    Precision,
    TrainingMemory,
    matmul_share,
    state_bytes_per_param,
    training_memory,
)
from app.accounting.transformer import TransformerConfig
from app.accounting.units import GIB

PAGED = ("adam", "adamw", "adamw_8bit")
"""Optimizers bitsandbytes has paged versions of (PagedAdam, PagedAdamW, PagedAdamW8bit)."""
BASE_DTYPE = {"fp32": "float32", "bf16_autocast": "float32", "bf16_mixed": "bfloat16",
              "fp16_mixed": "float16", "bf16": "bfloat16"}
QLORA_KEEP = (*DEFAULT_KEEP, "routed_experts")
"""What transformers' bitsandbytes integration leaves unquantized: it swaps nn.Linear modules only,
so besides the embeddings, head, norms and routers, transformers 5.x's fused 3-D expert parameters."""
RECOMPUTE_LAYER = "recompute_layer"
MOMENTS = (*phases.PHASES[:2], RECOMPUTE_LAYER, *phases.PHASES[2:])
"""The step's phases (training/phases.py) and the stacks' rerun checkpointed layer, in step order."""


@dataclass(slots=True)
class FineTuneMemory:
    """Bytes on one GPU unless named otherwise."""

    mode: str
    trainable_params: int
    frozen_params: int
    """The base's parameters that do not train (lora, qlora: all of them)."""
    frozen_weights: int
    """The frozen parameters, in the precision's parameter dtype or, for qlora, the base format."""
    base_format: str | None
    parameters: int
    """The trainable parameters themselves."""
    gradients: int
    optimizer_state: int
    master_weights: int
    weight_copies: int
    """bf16_autocast's 16-bit weight copies kept through the step: autocast's cache of the
    trainable matmul weights, and each frozen matrix's own cast, which F.linear keeps for the
    input gradient wherever backward computes one (elsewhere the cast is freed at once)."""
    activations: int
    activation_items: dict[str, int]
    """Bytes kept for backward by saved tensor, summed over layers."""
    transient: int
    """At the start of backward: the loss's fp32 gradients, and a QLoRA base's one matrix
    dequantized to the compute dtype."""
    inputs: int
    """The micro-batch's token ids and targets, int64."""
    optimizer_temporaries: int
    """As POST /api/v1/memory/training's: none fused, the largest trainable tensor's for torch's
    per-tensor Adagrad and RMSprop."""
    start_of_backward: int
    """Live bytes as backward starts: every kind above. The total before the later phases."""
    phases: dict[str, int]
    """Live bytes at each moment of the step that can hold the peak (training/phases.py):
    start_of_backward, lm_head_weight_gradient and end_of_backward where the head trains,
    recompute_layer (a stack other than tally, with recompute full: the largest checkpointed
    layer rerun and differentiated beside the layer inputs still held), optimizer_step."""
    peak_phase: str
    total: int
    """The step's peak: the largest of phases, what the train_step probe measures."""
    total_gib: float
    torch_allocated_peak: int
    """The peak as torch's caching allocator counts it (torch.cuda.max_memory_allocated, what the
    train_step probe and torchtune's logs read): total less a paged optimizer's state, which
    bitsandbytes allocates as CUDA managed memory outside that allocator (bitsandbytes/functional.py,
    get_paged: cget_managed_ptr)."""
    paged_optimizer: bool
    gpu: str | None
    gpu_memory_bytes: int | None
    fits: bool | None
    """total <= the GPU's memory, or with a paged optimizer, total - optimizer_state (its state
    pages to host memory when the GPU runs short, at the cost of PCIe traffic)."""
    headroom: int | None
    stack: str
    """The stack whose conventions the step follows (finetune/stacks.py)."""
    loss_chunks: int
    """Chunks of tokens the loss runs in (1: the whole micro-batch at once)."""
    offloaded: int
    """Bytes of checkpointed layer inputs in host memory (the stack's offload), not counted on the GPU."""
    assumptions: list[str]

    __pydantic_config__ = RECORD


def finetune_memory(cfg: TransformerConfig, spec: ft.FineTune, *, precision: Precision, optimizer: Optimizer,
                    batch_size: int, seq_len: int, recompute: act.Recompute = "selective",
                    paged_optimizer: bool = False, data_parallel: int = 1, zero_stage: int = 0,
                    gpu: Accelerator | None = None, fused_optimizer: bool | None = None,
                    largest_param: int | None = None, stack: str = "tally",
                    options: stacks.Options = stacks.Options()) -> FineTuneMemory:
    """One GPU's bytes at the step's peak. fused_optimizer and largest_param as training_memory's
    (largest_param: elements of the largest tensor the optimizer steps); stack and a recipe's options
    over it: finetune/stacks.py."""
    ft.check(cfg, spec)
    if stack not in stacks.STACKS:
        raise InvalidInput("stack", f"must be one of {', '.join(stacks.NAMES)}, got {stack!r}")
    if options.activation_offload and recompute != "full":
        raise InvalidInput("activation_offload", "offloads the checkpointed layer inputs, as torchtune and "
                                                 "Unsloth do: it needs recompute full")
    if options.loss_chunks is not None and options.loss_chunks < 1:
        raise InvalidInput("loss_chunks", f"must be at least 1, got {options.loss_chunks}")
    rules = stacks.stack(stack, options)
    in_backward = options.optimizer_in_backward
    if paged_optimizer and optimizer not in PAGED:
        raise InvalidInput("paged_optimizer", f"bitsandbytes pages {', '.join(PAGED)}; not {optimizer}")
    if spec.mode == "qlora" and precision in ("fp32", "bf16_autocast"):
        raise InvalidInput("precision", "QLoRA computes in 16 bits over its quantized base: bf16_mixed, "
                                        "fp16_mixed or bf16")
    if cfg.position == "learned" and seq_len > cfg.max_seq_len:
        raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {cfg.max_seq_len} learned positions")
    if spec.mode == "full":
        mem = training_memory(model=cfg, params=None, precision=precision, optimizer=optimizer,
                              batch_size=batch_size, seq_len=seq_len, recompute=recompute,
                              zero_stage=zero_stage, data_parallel=data_parallel,
                              fused_optimizer=fused_optimizer, largest_param=largest_param)
        one_grad = None
        if in_backward:  # a post-accumulate-grad hook steps each parameter and frees its gradient
            one_grad = shard(largest_trainable(cfg, spec) * PRECISIONS[precision].grad,
                             data_parallel if zero_stage >= 2 else 1)
        return _full(mem, cfg, rules, paged=paged_optimizer, gpu=gpu, recompute=recompute, seq_len=seq_len,
                     batch_size=batch_size, precision=precision, one_gradient=one_grad)
    p = PRECISIONS[precision]
    # peft's prepare_model_for_kbit_training under QLoRA (stack hf): the embeddings, norms and head in
    # fp32, and with them the residual stream; matmuls still read 16-bit casts (autocast, bitsandbytes)
    kbit = rules.kbit_fp32 and spec.mode == "qlora"
    residual = 4 if kbit else p.residual
    plan = ft.graph(cfg, spec)
    notes = [f"batch_size {batch_size} is the micro-batch per data-parallel rank"]
    if spec.mode == "freeze":
        count = freeze_params(cfg, freeze_embeddings=spec.freeze_embeddings, freeze_head=spec.freeze_head,
                              freeze_layers=spec.freeze_layers)
        trainable, frozen = count.trainable_params, count.frozen_params
        copies = math.ceil(trainable * p.weight_copy * matmul_share(cfg))
    else:
        count = lora_params(cfg, rank=spec.rank, targets=spec.targets, train_embeddings=spec.train_embeddings,
                            train_head=spec.train_head)
        trainable, frozen = count.trainable_params, count.base_params
        copies = trainable * p.weight_copy
        notes.append("adapters in the parameter dtype, no dropout on their input (peft's lora_dropout 0), "
                     "so A reads the wrapped matrix's own input")
    dequantized = 0
    if spec.mode == "qlora":
        base = weight_bytes(cfg, spec.base_format, keep=QLORA_KEEP,
                            base_dtype="float32" if kbit else BASE_DTYPE[precision])
        frozen_bytes = base.total_bytes
        dequantized = _largest_matrix(cfg) * p.activation  # the compute dtype
        notes.append(f"base in {base.format_name}; {', '.join(base.kept)} kept in {base.base_dtype}; each "
                     "matmul dequantizes its weight to the compute dtype and frees it")
    else:
        frozen_bytes = frozen * p.param
    copies += frozen_weights_in_backward(cfg, spec) * p.weight_copy
    if kbit and plan.head_input_grad and not plan.head_trains:
        # autocast casts the fp32 head to 16 bits for its matmul, and F.linear keeps that cast for the
        # input gradient (the head's weight requires none, so autocast's cache does not hold it)
        copies += cfg.vocab_size * cfg.d_model * p.activation
    per = state_bytes_per_param(precision, optimizer)
    dp, z = data_parallel, zero_stage

    def share(n: float, stage: int) -> int:
        return shard(n, dp if z >= stage else 1)

    layer_kw = dict(rank=spec.rank, act_bytes=p.activation, residual_bytes=residual, seq_len=seq_len,
                    batch_size=batch_size, weight_bytes=p.param,
                    # bitsandbytes' Linear8bitLt keeps its input whenever it requires a gradient
                    frozen_keep_inputs=spec.mode == "qlora" and spec.base_format == "int8_channel")
    items = saved.saved(cfg, plan, recompute=recompute, **layer_kw)
    tokens = seq_len * batch_size
    loss = stacks.loss(rules, tokens=tokens, vocab=cfg.vocab_size, d_model=cfg.d_model,
                       act_bytes=p.activation)
    items, offloaded = _stack_items(items, rules, loss, recompute=recompute,
                                    layer_bytes=tokens * cfg.d_model * residual)
    # optimizer_in_backward: a post-accumulate-grad hook steps each parameter and frees its gradient
    grads = largest_trainable(cfg, spec) * per.gradients if in_backward else trainable * per.gradients
    parts = {"frozen_weights": share(frozen_bytes, 3), "parameters": share(trainable * per.parameters, 3),
             "gradients": share(grads, 2),
             "optimizer_state": share(trainable * per.optimizer_state, 1),
             "master_weights": share(trainable * per.master_weights, 1), "weight_copies": copies,
             "activations": sum(items.values()), "transient": loss.transient + dequantized,
             "inputs": phases.token_inputs(seq_len * batch_size)}
    if z and dp == 1:
        notes.append("ZeRO shards over data-parallel ranks; with data_parallel 1 it saves nothing")
    # The LM head's weight gradient exists where the head (or peft's trained copy of it) trains.
    later = {} if not plan.head_trains else phases.lm_head_phases(
        parts, vocab_size=cfg.vocab_size, d_model=cfg.d_model, tied=cfg.tied_embeddings, grad_bytes=p.grad)
    if rules.recompute_phase and recompute == "full":
        # the last decoder layer, first in backward: every layer input still on the GPU, the layer's
        # own activations, the gradient arriving and the one leaving, and a dequantized QLoRA matrix
        later[RECOMPUTE_LAYER] = (sum(parts[k] for k in phases.STATES) + copies + items.get("layer_input", 0)
                                  + saved.recomputed_layer(cfg, plan, **layer_kw) + dequantized
                                  + phases.activation_gradients(tokens, cfg.d_model, residual))
    fused = optimizer in phases.FUSED if fused_optimizer is None else fused_optimizer
    if largest_param is None:
        largest_param = 0 if fused else share(largest_trainable(cfg, spec), 1)
    peak = phases.step_peak(parts, largest_param=largest_param, optimizer=optimizer, fused=fused, later=later,
                            state_bytes=p.optimizer_state)
    if rules.gradients_freed:
        head = cfg.vocab_size * cfg.d_model * per.gradients if plan.head_trains else 0
        peak = _gradients_freed(peak, parts["gradients"], head)
    notes += phases.notes(optimizer, fused=fused)
    notes += stacks.notes(rules, mode=spec.mode, recompute=recompute, chunks=loss.chunks, offloaded=offloaded)
    return _answer(spec.mode, trainable, frozen, spec.base_format if spec.mode == "qlora" else None, peak,
                   items, paged_optimizer, gpu, notes, stack=(rules.name, loss.chunks, offloaded))


def _stack_items(items: dict[str, int], rules: stacks.Stack, loss: stacks.Loss, *, recompute: str,
                 layer_bytes: int) -> tuple[dict[str, int], int]:
    """The saved tensors with the stack's loss in place of the fp32 logits the recipe keeps, and with
    its offload: the layer inputs on the GPU, and the bytes that went to host memory.
    layer_bytes: one checkpointed layer input (tokens x d_model in the residual stream's dtype)."""
    items = {k: v for k, v in items.items() if k != "head/logits_fp32"}
    items |= {name: size for name, size in (("head/logits_fp32", loss.kept),
                                             ("head/hidden_gradient", loss.hidden_gradient)) if size}
    held = items.get("layer_input", 0)
    if not (rules.offload_checkpoints and recompute == "full" and held):
        return items, 0
    on_gpu = min(held, stacks.UNSLOTH_GPU_CHECKPOINTS * layer_bytes)
    return items | {"layer_input": on_gpu}, held - on_gpu


def shard(n: float, ranks: int) -> int:
    """One rank's bytes of n split over `ranks`, rounded up."""
    return math.ceil(n / ranks)


def _full(mem: TrainingMemory, cfg: TransformerConfig, rules: stacks.Stack, *, paged: bool,
          gpu: Accelerator | None, recompute: str, seq_len: int, batch_size: int,
          precision: Precision, one_gradient: int | None) -> FineTuneMemory:
    """Mode full: the training calculator's answer, its activations summed over layers by name; under
    another stack than tally, or a recipe's flags, its loss, offload and rerun layer in place of the
    calculator's. one_gradient: bytes of the one gradient held at a time (optimizer_in_backward)."""
    detail = mem.activation_detail
    items: dict[str, int] = {}
    for kind in detail.layer_kinds or ():
        for name, size in kind.per_layer.items():
            items[name] = items.get(name, 0) + size * kind.held
    items |= detail.outside_layers
    peak = {"frozen_weights": 0} | phases.breakdown(mem)
    notes = [n for n in mem.assumptions if not n.startswith("excludes the CUDA context")]  # _answer's own
    if rules == stacks.STACKS["tally"] and one_gradient is None:
        return _answer("full", mem.params, 0, None, peak, items, paged, gpu, notes, stack=("tally", 1, 0))
    p, tokens = PRECISIONS[precision], seq_len * batch_size
    loss = stacks.loss(rules, tokens=tokens, vocab=cfg.vocab_size, d_model=cfg.d_model,
                       act_bytes=p.activation)
    items, offloaded = _stack_items(items, rules, loss, recompute=recompute,
                                    layer_bytes=tokens * cfg.d_model * p.residual)
    parts = {k: peak[k] for k in phases.PARTS} | {"activations": sum(items.values()),
                                                    "transient": loss.transient}
    if one_gradient is not None:
        parts["gradients"] = one_gradient
    later = phases.lm_head_phases(parts, vocab_size=cfg.vocab_size, d_model=cfg.d_model,
                                  tied=cfg.tied_embeddings, grad_bytes=p.grad)
    if rules.recompute_phase and recompute == "full":
        layer = max(sum(act.sized(act.layer_recipe(lyr, p.activation, "selective", p.residual), s=seq_len,
                                  b=batch_size, t=1, sequence_parallel=False).values())
                    for lyr in blocks.layers(cfg))
        later[RECOMPUTE_LAYER] = (sum(parts[k] for k in phases.STATES) + parts["weight_copies"]
                                  + items.get("layer_input", 0) + layer
                                  + phases.activation_gradients(tokens, cfg.d_model, p.residual))
    moments = {"start_of_backward": sum(parts.values()), **later,
               "optimizer_step": sum(parts[k] for k in phases.STATES) + peak["optimizer_temporaries"]}
    peak = parts | {"optimizer_temporaries": peak["optimizer_temporaries"]} | moments | {
        "total": max(moments.values())}
    if rules.gradients_freed:
        peak = _gradients_freed(peak, parts["gradients"], cfg.vocab_size * cfg.d_model * p.grad)
    notes += stacks.notes(rules, mode="full", recompute=recompute, chunks=loss.chunks, offloaded=offloaded)
    return _answer("full", mem.params, 0, None, peak, items, paged, gpu, notes,
                   stack=(rules.name, loss.chunks, offloaded))


def _gradients_freed(peak: dict[str, int], gradients: int, head_gradient: int) -> dict[str, int]:
    """step_peak's answer for a stack that frees gradients between steps: no gradient at the start of
    backward, only the LM head's (head_gradient bytes, where it trains) while the head's weight
    gradient or a rerun checkpointed layer is computed; whole at the end of backward and the step."""
    early = {"start_of_backward": gradients, "lm_head_weight_gradient": gradients,
             RECOMPUTE_LAYER: max(0, gradients - head_gradient)}
    peak = peak | {k: peak[k] - less for k, less in early.items() if k in peak}
    return peak | {"total": max(peak[k] for k in MOMENTS if k in peak)}


def _answer(mode: str, trainable: int, frozen: int, base_format: str | None, peak: dict[str, int],
            items: dict[str, int], paged: bool, gpu: Accelerator | None, notes: list[str], *,
            stack: tuple[str, int, int]) -> FineTuneMemory:
    """`peak`: phases.step_peak's bytes by kind, temporaries, phases and total; `stack`: its name, the
    loss's chunks and the bytes offloaded to host memory."""
    total = peak["total"]
    moments = {k: peak[k] for k in MOMENTS if k in peak}
    parts = {k: peak[k] for k in phases.PARTS} | {
        "optimizer_temporaries": peak["optimizer_temporaries"], "phases": moments,
        "start_of_backward": peak["start_of_backward"], "peak_phase": max(moments, key=moments.__getitem__)}
    on_gpu = total - parts["optimizer_state"] if paged else total
    if paged:
        notes.append("paged optimizer: its state may page to host memory when the GPU runs short "
                     "(bitsandbytes' unified memory); fits counts the rest")
    notes.append("excludes the CUDA context, allocator fragmentation and communication buffers")
    if gpu is not None:
        notes.append(memory_note(gpu))
    return FineTuneMemory(
        mode=mode, trainable_params=trainable, frozen_params=frozen, base_format=base_format,
        activation_items=items, total=total, total_gib=total / GIB, paged_optimizer=paged,
        torch_allocated_peak=on_gpu,
        gpu=None if gpu is None else gpu.id, gpu_memory_bytes=None if gpu is None else gpu.memory_bytes,
        fits=None if gpu is None else on_gpu <= gpu.memory_bytes,
        headroom=None if gpu is None else gpu.memory_bytes - total, stack=stack[0], loss_chunks=stack[1],
        offloaded=stack[2], assumptions=notes, **parts)


def _largest_matrix(cfg: TransformerConfig) -> int:
    """Elements of the largest matrix a QLoRA base quantizes (QLORA_KEEP's are not): attention's
    projections, dense MLPs and shared experts, each layer's blocks' weights."""
    quantized = ("attention", "mlp", "shared_experts")
    return max(w.params for layer, _ in blocks.distinct(cfg) for w in layer.weights()
               if len(w.shape) == 2 and w.component in quantized)


def largest_trainable(cfg: TransformerConfig, spec: ft.FineTune) -> int:
    """Elements of the largest tensor the optimizer steps, in transformers' layout: an adapter's A
    (r x in) or B (out x r), r x experts wide on a 3-D expert parameter, or a trained copy of the
    embedding or head; frozen parts aside, the trained tables, the trained layers' weights, the
    final norm."""
    d, table = cfg.d_model, cfg.vocab_size * cfg.d_model
    if spec.adapted:
        ranks = wrapped(cfg, ft.targets_of(cfg, spec))  # target -> its multiple of lora_rank
        adapters = [spec.rank * ranks[m.module] * m.experts * max(m.fan_in, m.fan_out)
                    for layer, _ in blocks.distinct(cfg) for m in layer.linears() if m.module in ranks]
        return max(adapters + [table] * (spec.train_embeddings or spec.train_head))
    plan = ft.graph(cfg, spec)
    tables = [table] if plan.embedding_trains or plan.head_trains else []
    if plan.embedding_trains and cfg.position == "learned":
        tables.append(cfg.max_seq_len * d)
    trained = {layer for layer, grad in zip(blocks.layers(cfg), plan.layers, strict=True) if grad.whole}
    return max(d, *tables, *(w.params for layer in trained for w in layer.weights()))
