"""The calculators' view of a probe's workload, torch-free: the server uses it to refuse
a job that would not fit, the child sets it beside what it measures."""

from dataclasses import dataclass

from app.accounting import activations, flops, memory, models
from app.api.schemas import engine_model
from app.bench.specs import CruncherSpec, TrainStepParams

ELEMENT_BYTES = {"float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}
INT64_BYTES = 4 * 2


@dataclass(frozen=True)
class TrainStepPrediction:
    name: str
    """"cruncher", a preset's name, or "custom"."""
    params: int
    flops_per_step: int
    memory: dict[str, int]
    """Bytes by kind, with their total."""
    config: models.TransformerConfig | None


def train_step(p: TrainStepParams) -> TrainStepPrediction:
    engine = "bf16_autocast" if p.precision == "bf16_autocast" else "fp32"
    tokens = p.batch_size * p.seq_len
    spec = p.model
    if isinstance(spec, CruncherSpec):
        dims = (spec.dim,) * (spec.num_layers + 1) + (1,)
        counts = flops.mlp(tokens, list(dims))
        per = memory.state_bytes_per_param(engine, p.optimizer)
        width = memory.PRECISIONS[engine]
        saved = activations.linear_stack(tokens, dims, width.activation, input_copied=engine != "fp32")
        n = counts.params
        parts = {
            "parameters": n * int(per.parameters), "gradients": n * int(per.gradients),
            "optimizer_state": round(n * per.optimizer_state), "master_weights": 0,
            "weight_copies": n * width.weight_copy, "activations": sum(saved.values()),
            # Backward starts with two activation gradients in flight: dL/d(output), dL/d(input).
            "transient": 2 * tokens * spec.dim * width.activation,
            "inputs": 4 * tokens * (spec.dim + 1),  # x (B, T, D) and the target (B, T), fp32
        }
        return TrainStepPrediction("cruncher", n, counts.total, _with_total(parts), None)
    cfg = engine_model(spec, field="params.model")
    # SDPA never stores the s x s scores: the calculators' "selective" set of saved tensors.
    mem = memory.training_memory(model=cfg, params=None, precision=engine, optimizer=p.optimizer,
                                 batch_size=p.batch_size, seq_len=p.seq_len, recompute="selective")
    parts = {"parameters": mem.parameters, "gradients": mem.gradients, "optimizer_state": mem.optimizer_state,
             "master_weights": mem.master_weights, "weight_copies": mem.weight_copies,
             "activations": mem.activations or 0, "transient": mem.transient or 0,
             "inputs": 2 * INT64_BYTES * tokens}  # token ids and targets
    return TrainStepPrediction(spec if isinstance(spec, str) else "custom", models.count_params(cfg).total,
                               flops.transformer(cfg, p.batch_size, p.seq_len).step.total,
                               _with_total(parts), cfg)


def _with_total(parts: dict[str, int]) -> dict[str, int]:
    return parts | {"total": sum(parts.values())}


def matmul_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """A, B and the output (bfloat16 for float8) resident at once."""
    out = 2 if dtype == "float8_e4m3fn" else ELEMENT_BYTES[dtype]
    return (m * k + k * n) * ELEMENT_BYTES[dtype] + m * n * out


def largest_matmul(shapes: list[tuple[int, int, int]], dtypes: list[str]) -> tuple[int, int]:
    """(index of the shape, bytes) of the most memory any one measurement needs."""
    return max(((i, matmul_bytes(*s, d)) for i, s in enumerate(shapes) for d in dtypes), key=lambda x: x[1])
