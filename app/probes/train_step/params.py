"""What a train step trains and how: the train_step probe's parameters, which
data_parallel_step, data_loader and checkpoint share (TrainStepFields)."""

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from app.inputs.fields import Input, count, sequence_length, tagged
from app.inputs.schemas import Preset, TransformerConfigIn
from app.probes.params import ProbeParams, SustainParams, rule


class CruncherSpec(Input):
    """The course's deep linear model: num_layers square (dim x dim) linear layers, then a
    dim -> 1 head, no biases; the input is (batch_size, seq_len, dim) random normal."""

    kind: Literal["cruncher"]
    dim: count(1, 65_536) = 1024
    num_layers: count(0, 1024) = 4


def _train_model_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, CruncherSpec) or (isinstance(value, dict) and value.get("kind") == "cruncher"):
        return "cruncher"
    if isinstance(value, (dict, TransformerConfigIn)):
        return "config"
    return None


FineTuneMode = Literal["full", "freeze", "lora", "qlora"]

LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up", "experts_gate_up",
                     "experts_down"]


QloraFormat = Literal["nf4", "nf4_double_quant", "int8_channel"]

_TRAIN_MODEL_HELP = ('{"kind": "cruncher", ...}, a preset name (GET /api/v1/models) or an inline '
                     "TransformerConfig")


TrainModel = tagged({"cruncher": CruncherSpec, "preset": Preset, "config": TransformerConfigIn},
                    _train_model_kind, f"model must be {_TRAIN_MODEL_HELP}")


class TrainStepFields(ProbeParams):
    """What a train step trains and how: the train_step probe's fields, and data_parallel_step's."""

    model: TrainModel = Field(  # type: ignore[valid-type]
        default_factory=lambda: CruncherSpec(kind="cruncher"), description=f"The model: {_TRAIN_MODEL_HELP}.")
    batch_size: count(1, 65_536) = 4
    seq_len: sequence_length(1, 1_048_576) = 256
    optimizer: Literal["sgd", "adagrad", "adam", "adamw"] = "adamw"
    precision: Literal["fp32", "bf16_autocast", "bf16"] = Field(
        "fp32", description="bf16_autocast: fp32 weights and optimizer state, matmuls in bf16. bf16: "
        "everything in bf16 (weights, gradients, optimizer state, activations), the logits upcast to "
        "fp32 for the loss; QLoRA's precision.")
    warmup_steps: count(1, 1000) = 2
    steps: count(1, 10_000) = 5
    # Fine-tuning (transformers only), as peft and bitsandbytes build it: app/bench/lora.py.
    mode: FineTuneMode = Field(
        "full", description="full: every weight trains; freeze: freeze_embeddings, freeze_head and the first "
        "freeze_layers layers frozen, the rest trained whole; lora: the base frozen, LoRA adapters on "
        "lora_targets; qlora: lora over a base stored by bitsandbytes in base_format.")
    lora_rank: count(1, 4096) = Field(
        8, description="lora, qlora: r, the adapters' inner width (peft's default 8).")
    lora_targets: Annotated[list[LoraTarget], Field(min_length=1, max_length=11)] | None = Field(
        None, description="lora, qlora: the matrices adapted in every layer: q, k, v, o (attention), gate, "
        "up, down (dense MLPs and shared experts), or qkv and gate_up where the model fuses them. Default: "
        "peft's for the family (q, v; qkv where fused). The probe does not build adapters on routed "
        "experts (experts_gate_up, experts_down) yet.")
    freeze_embeddings: bool = Field(False, description="freeze: the token (and position) embedding frozen.")
    freeze_head: bool = Field(
        False, description="freeze: the LM head frozen (a tied head: freeze both or neither).")
    freeze_layers: count(0, 65_536) = Field(0, description="freeze: the first k transformer layers frozen.")
    base_format: QloraFormat = Field(
        "nf4_double_quant", description="qlora: how bitsandbytes stores the frozen base's matrices: nf4 "
        "(Linear4bit), nf4_double_quant (Linear4bit, compress_statistics) or int8_channel (Linear8bitLt).")

    @field_validator("lora_targets")
    @classmethod
    def _targets(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise rule("name each target once")
        return value


class TrainStepParams(TrainStepFields, SustainParams):
    """The train_step probe: a step, and with sustain_s its sustained run."""

    compile: bool = Field(
        False, description="Run the model under torch.compile (inductor: fused elementwise kernels around "
        "the matmuls, attention through SDPA's flash or memory-efficient kernels as in eager), so its MFU "
        "describes an optimized stack; the first steps compile. The memory prediction stays eager's.")
