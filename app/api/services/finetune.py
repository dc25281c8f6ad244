"""Fine-tuning: what trains, memory per GPU, FLOPs and time of one step."""

from typing import Annotated, Any

from pydantic import Field

from app.accounting.calibration import step as calibration_step
from app.accounting.calibration import surface
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.finetune import lora
from app.accounting.finetune.spec import QLORA_FORMATS, FineTune, Mode
from app.accounting.finetune.stacks import Options, StackName
from app.accounting.finetune.step import FineTuneStep, finetune_step
from app.accounting.inference import formats
from app.accounting.training import activations, memory
from app.api.services.time import DEFAULT_MFU
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, count, number, sequence_length
from app.inputs.schemas import GpuOverridesIn, GpuRef, ModelSpec, accelerator, engine_model, named

# A target as Tally names it, or as peft does (q_proj: q), which the answer echoes as Tally's name.
Target = named("LoRA target", lora.TARGETS, "the lora_targets description", lora.target)
Targets = Annotated[list[Target],  # type: ignore[valid-type]
                    Field(min_length=1, max_length=len(lora.TARGETS))]
BaseFormat = named("QLoRA base format", QLORA_FORMATS, formats.QUANTIZATION_LISTING,
                   lambda name: formats.lookup_format(name).id)


STACK_DESCRIPTION = (
    "The framework whose conventions the step follows, for what the loss keeps of the logits and where "
    "checkpointed activations live. tally: one fp32 copy of the logits kept and two fp32 gradients at the "
    "start of backward. hf: transformers' ForCausalLMLoss (the same 12 bytes a token a vocabulary entry), "
    "and under qlora peft's prepare_model_for_kbit_training (embeddings, norms, head and residual stream in "
    "fp32). unsloth: the loss in chunks with no logits kept (unsloth_fused_ce_loss), and with recompute full "
    "the checkpointed layer inputs offloaded to host memory. torchtune: LinearCrossEntropyLoss in 8 chunks, "
    "each keeping its fp32 log-probabilities (compile off, as its configs ship). Stacks other than tally "
    "also count a checkpointed layer's rerun in backward (recompute full).")


class RecipeFlags(Input):
    """A recipe's flags over its stack's defaults (finetune/stacks.py, Options), as torchtune names them."""

    loss_chunks: count(1, 4096) | None = Field(
        None, description="Chunks of tokens the loss runs in, one after another (torchtune's "
                          "num_output_chunks; 1: the whole micro-batch at once); null: the stack's rule.")
    torch_compile: bool = Field(
        False, description="The loss compiled (torchtune's compile: True): it keeps each chunk's 16-bit "
                           "logits rather than fp32 log-probabilities. Unsloth's loss is compiled already.")
    activation_offload: bool = Field(
        False, description="With recompute full: the checkpointed layer inputs in pinned host memory, two "
                           "on the GPU (torchtune's enable_activation_offloading; Unsloth's stack does it "
                           "already).")
    optimizer_in_backward: bool = Field(
        False, description="Each parameter steps as its gradient lands, which is then freed (torchtune's "
                           "optimizer_in_bwd): one tensor's gradient is held at a time.")

    def options(self) -> Options:
        return Options(**{name: getattr(self, name) for name in RecipeFlags.model_fields})


class FineTuneRequest(RecipeFlags):
    model: ModelSpec
    mode: Mode = Field(
        "lora", description="full: every weight trains. freeze: the parts named by freeze_* frozen, the rest "
                            "trained whole. lora: the base frozen, adapters on lora_targets (peft's LoRA). "
                            "qlora: lora over a base stored in base_format (bitsandbytes).")
    lora_rank: count(1, 65_536) = Field(16, description="lora, qlora: the adapters' rank r.")
    lora_targets: Targets | None = Field(  # type: ignore[valid-type]
        None,
        description="lora, qlora: matrices wrapped in every layer that has them (peft's target_modules): "
                    "q, k, v, o, gate, up, down; qkv and gate_up where the model fuses them, as GPT-2's "
                    "c_attn and Phi-3's gate_up_proj; experts_gate_up and experts_down, the routed experts' "
                    "3-D parameters (peft's target_parameters). peft's module name for a target names it "
                    "too. As peft maps them on Qwen3-MoE, gate and up together wrap its routed experts' "
                    "gate_up at rank 2r, and down their down, not its dense MLPs. null is peft's default "
                    "for the family: q and v, or the fused qkv.")
    train_embeddings: bool = Field(False, description="lora, qlora: train a copy of the token embedding "
                                                      "whole (peft's modules_to_save).")
    train_head: bool = Field(False, description="lora, qlora: train a copy of the LM head whole.")
    freeze_embeddings: bool = Field(False, description="freeze: the token and position embeddings.")
    freeze_head: bool = Field(False, description="freeze: the LM head (with tied embeddings, freeze both "
                                                 "or neither).")
    freeze_layers: count(0, 100_000) = Field(0, description="freeze: the first k transformer layers.")
    base_format: BaseFormat = Field(  # type: ignore[valid-type]
        "nf4_double_quant", description="qlora: how the frozen base is stored: nf4, nf4_double_quant "
                                        "(QLoRA's default) or int8_channel.")
    precision: memory.Precision = Field(
        "bf16_mixed", description="As POST /api/v1/memory/training. Frozen weights are stored in its "
                                  "parameter dtype (qlora: in base_format); trainable ones carry its whole "
                                  "training state.")
    optimizer: memory.Optimizer = "adamw"
    paged_optimizer: bool = Field(
        False, description="bitsandbytes' paged optimizer (adam, adamw, adamw_8bit): its state may page "
                           "to host memory when the GPU runs short; `fits` then counts the rest.")
    batch_size: count(1, 1_000_000) = Field(1, description="Micro-batch per GPU, in sequences.")
    seq_len: sequence_length(1, 10_000_000) | None = Field(
        None, description="Tokens per sequence; null means the model's max_seq_len.")
    recompute: activations.Recompute = Field(
        "selective", description="As POST /api/v1/memory/training: full is gradient checkpointing "
                                 "(transformers' gradient_checkpointing=True).")
    data_parallel: count(1, 1_000_000) = Field(1, description="GPUs, each running its own micro-batch.")
    zero_stage: count(0, 3) = Field(
        0, description="Shards the trainable states over data_parallel ranks; 3 also shards the frozen "
                       "weights (FSDP, FSDP-QLoRA).")
    gpu: GpuRef | None = Field(None, description="Check the total against this GPU's memory, and time the "
                                                "step at its dense peak.")
    gpu_overrides: GpuOverridesIn | None = None  # type: ignore[valid-type]
    mfu: number(ge=1e-6, le=1) = Field(DEFAULT_MFU, description="Share of the dense peak the step's FLOPs "
                                                                "run at (with a gpu).")
    stack: StackName = Field("tally", description=STACK_DESCRIPTION)
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: `calibrated`, the step from the profile's full train "
        "step of this model and batch, its GEMMs scaled by the fine-tune's FLOPs and its optimizer by the "
        "parameters it steps.")

    def spec(self) -> FineTune:
        targets = None if self.lora_targets is None else tuple(self.lora_targets)
        return FineTune(mode=self.mode, rank=self.lora_rank, targets=targets,
                        train_embeddings=self.train_embeddings, train_head=self.train_head,
                        freeze_embeddings=self.freeze_embeddings, freeze_head=self.freeze_head,
                        freeze_layers=self.freeze_layers, base_format=self.base_format)


# The train_step probe's precision whose fit stands for a fine-tune's: the same GEMM dtype.
FIT_PRECISION = {"fp32": "fp32", "bf16_autocast": "bf16_autocast", "bf16_mixed": "bf16_autocast"}


def step(body: FineTuneRequest, profile: Profile | None = None) -> FineTuneStep:
    """`profile`: the one `calibration` names, read by the caller (services.calibration.resolve)."""
    cfg = engine_model(body.model)
    answer = finetune_step(
        cfg, body.spec(), precision=body.precision, optimizer=body.optimizer, batch_size=body.batch_size,
        seq_len=body.seq_len or cfg.max_seq_len, recompute=body.recompute,
        paged_optimizer=body.paged_optimizer, data_parallel=body.data_parallel, zero_stage=body.zero_stage,
        gpu=accelerator(body.gpu, body.gpu_overrides), mfu=body.mfu, stack=body.stack,
        options=body.options())
    if profile is not None:
        answer.calibrated = _calibrated(body, cfg, profile, answer)
    return answer


def _calibrated(body: FineTuneRequest, cfg: Any, profile: Profile, answer: FineTuneStep) -> Any:
    acc = accelerator(body.gpu, body.gpu_overrides)
    if acc is not None and profile.catalogue_id != acc.id:
        where = profile.catalogue_id or "a device outside the catalogue"
        raise InvalidInput("calibration", f"{profile.label} was measured on {where}, not {acc.id}")
    precision = FIT_PRECISION.get(body.precision)
    if precision is None:
        raise InvalidInput("calibration", f"no train step fit stands for precision {body.precision}: the "
                                          "profile's are fp32 and bf16_autocast")
    seq = body.seq_len or cfg.max_seq_len
    counts = calibration_step.counts(cfg, batch_size=body.batch_size, seq_len=seq, precision=precision,
                                     optimizer=body.optimizer)
    surf = surface.fit(list(profile.matmul), calibration_step.MATMUL_DTYPE[precision])
    whole = calibration_step.calibrated(counts, profile, surf, precision)
    return calibration_step.finetuned(whole, flops=answer.flops.total,
                                      trainable_fraction=answer.trainable_params / answer.total_params)
