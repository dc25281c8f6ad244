"""What the train_step probe reports. Seconds, bytes and FLOP/s unless a name says otherwise."""

from dataclasses import dataclass
from typing import Literal

from app.accounting.records import RECORD
from app.probes.results import Environment, MemoryComparison, Stats
from app.probes.sustained import Sustained


@dataclass(slots=True)
class TrainStepResult:
    probe: Literal["train_step"]
    environment: Environment
    model: str
    """"cruncher" or the preset name, or "custom"."""
    params: int
    batch_size: int
    seq_len: int
    tokens_per_step: int
    optimizer: str
    precision: str
    step: Stats
    forward: Stats
    backward: Stats
    optimizer_step: Stats
    tokens_per_sec: float
    """tokens_per_step / median step time."""
    flops_per_step: int
    """The calculators' exact matmul FLOPs for forward plus backward."""
    flops_per_step_6nd: float
    """6 x params x tokens_per_step, for comparison."""
    achieved_flop_per_sec: float
    peak_flop_per_sec: float | None
    mfu: float | None
    """Null on CPU and on devices the catalogue does not list."""
    memory: MemoryComparison
    loss_first: float
    loss_last: float
    assumptions: list[str]
    mode: Literal["full", "freeze", "lora", "qlora"] = "full"
    """What trained (TrainStepParams.mode); results from before fine-tuning modes trained every weight."""
    trainable_params: int | None = None
    """Parameters the optimizer stepped (requires_grad), counted in the model trained; null in
    results from before fine-tuning modes."""
    sustained: Sustained | None = None
    """With sustain_s: whole steps (forward, backward, optimizer) run back to back."""
    compiled: bool = False
    """The model ran under torch.compile (TrainStepParams.compile): inductor's fused kernels, so its
    MFU describes an optimized stack; the memory prediction stays eager PyTorch's."""

    __pydantic_config__ = RECORD
