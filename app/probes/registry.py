"""Every probe, once: its parameters, its result type, the child's entry point, its default
sizes, what it needs in device memory, the least time it can take, and a one-line summary.

Everything else reads this table: the child (which function to run), the jobs API (its
request union and result union), admission (the memory need and the least duration), the
launch form, and
`tally probe`. Adding a probe is one record here and one module in app/bench/.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter

from app.probes import checkpoint as ckpt
from app.probes import data_loader as loader
from app.probes import parallel, predict
from app.probes.burn_in import BurnInParams, BurnInResult, parts
from app.probes.parallel_results import CollectivesResult, DataParallelStepResult
from app.probes.params import (
    BANDWIDTH_BYTES,
    COLLECTIVE_SIZES,
    GENERATE_SIZES,
    MATMUL_SIZES,
    TRANSFER_SIZES,
    BandwidthParams,
    CollectivesParams,
    DataParallelStepParams,
    GenerateParams,
    MatmulParams,
    ProbeParams,
    SustainParams,
    TrainStepParams,
    TransferParams,
    bandwidth_bytes,
    flush_bytes,
    matmul_dtypes,
    matmul_shapes,
    transfer_sizes,
)
from app.probes.results import (
    BandwidthResult,
    GenerateResult,
    MatmulResult,
    TrainStepResult,
    TransferResult,
)

Kind = Literal["cuda", "cpu"]
Need = tuple[int, str]
"""Bytes on the device at the job's peak, and the parameter (a dotted path under the job
body) that sets them, for the refusal's message."""
Least = tuple[float, str]
"""Seconds the job cannot finish sooner than, and the parameter that sets them."""


@dataclass(frozen=True)
class Probe:
    name: str
    summary: str
    params: type[ProbeParams]
    result: type
    """A dataclass with a `probe` field equal to `name`."""
    entry: str
    """"module:function" run in the child (app/bench/child.py): (raw params, progress) -> result dict."""
    defaults: Mapping[Kind, Any]
    """The sizes a device kind gets when the parameters leave them out."""
    need: Callable[[Any, Kind], Need]
    """(params, kind) -> the device memory the job needs, not counting the timer's flush buffer."""
    least_seconds: Callable[[Any, Kind], Least]
    """(params, kind) -> a lower bound on the job's duration (see _least_seconds)."""
    scratch: Callable[[Any, Kind], Need] | None = None
    """(params, kind) -> bytes the job writes to the server's scratch disk (app/probes/scratch.py),
    and the parameter that sets them; None for a probe that writes no file."""


def _least_seconds(params: ProbeParams, measurements: int) -> Least:
    """The least time `measurements` runs of the timer (app/bench/timer.py) take: each warms up
    for warmup_s seconds at least (Timer.warm_up runs until that much has passed).

    The timed part is not counted: it lasts about measure_s, but a fast kernel reaches max_iters
    sooner, so no positive floor holds for it whatever the parameters. Child start-up, imports
    and allocation are not counted either. So a job refused by this estimate could never have
    finished, and one admitted may still time out.
    """
    return params.warmup_s * measurements, "params.warmup_s"


def _sustained(least: Least, params: SustainParams) -> Least:
    """A sustained run (sustain_s) lasts that long at least, after the timing."""
    seconds, name = least
    return (seconds + params.sustain_s, name if seconds >= params.sustain_s else "params.sustain_s")


def _matmul_least(params: MatmulParams, kind: Kind) -> Least:
    # Only the dtypes certain to run: float8 needs a compute capability NVML does not tell the
    # server, and tfloat32 on a CPU is skipped (app/bench/matmul.py).
    sure = [d for d in matmul_dtypes(params, kind)
            if d != "float8_e4m3fn" and (kind == "cuda" or d != "tfloat32")]
    return _sustained(_least_seconds(params, len(matmul_shapes(params, kind)) * len(sure)), params)


def _bandwidth_least(params: BandwidthParams, kind: Kind) -> Least:
    return _sustained(_least_seconds(params, 1), params)


def _transfer_least(params: TransferParams, kind: Kind) -> Least:
    # Per size: two directions, blocking and not, from pageable and (CUDA only) pinned memory.
    return _least_seconds(params, len(transfer_sizes(params, kind)) * 2 * 2 * (2 if kind == "cuda" else 1))


def _train_step_least(params: TrainStepParams, kind: Kind) -> Least:
    # Warm-up and timing count steps, not seconds (Timer.measure_phases): no floor from the parameters.
    return _sustained((0.0, "params.steps"), params)


def _data_parallel_least(params: DataParallelStepParams, kind: Kind) -> Least:
    return 0.0, "params.steps"  # as a train step's, with no sustained run


def _generate_least(params: GenerateParams, kind: Kind) -> Least:
    # The ceilings (a matmul, a copy, the launch floor), each prompt, each batch size at each context.
    plan = predict.generate(params, kind == "cuda")
    return _least_seconds(params, 3 + len(plan.prompt_lens) + len(plan.batch_sizes) * len(plan.contexts))


def _collectives_least(params: CollectivesParams, kind: Kind) -> Least:
    # Runs count iterations, not seconds: no floor from the parameters beyond starting the ranks.
    return 0.0, "params.iterations"


def _matmul_need(params: MatmulParams, kind: Kind) -> Need:
    i, need = predict.largest_matmul(matmul_shapes(params, kind), list(matmul_dtypes(params, kind)))
    return need, f"params.shapes.{i}" if params.sweep == "custom" else "params.sweep"


def _bandwidth_need(params: BandwidthParams, kind: Kind) -> Need:
    return 2 * bandwidth_bytes(params, kind), "params.size_bytes"  # source and destination


def _transfer_need(params: TransferParams, kind: Kind) -> Need:
    # The device buffer, plus a pageable and a pinned host copy when host and device are one.
    return max(transfer_sizes(params, kind)) * (1 if kind == "cuda" else 2), "params.sizes_bytes"


def _train_step_need(params: TrainStepParams, kind: Kind) -> Need:
    return predict.train_step(params, kind == "cuda").memory["total"], "params.batch_size"


def _collectives_need(params: CollectivesParams, kind: Kind) -> Need:
    return parallel.collectives_need(params, kind)


def _data_parallel_need(params: DataParallelStepParams, kind: Kind) -> Need:
    return parallel.data_parallel_need(params, kind)


def _generate_need(params: GenerateParams, kind: Kind) -> Need:
    return predict.generate_need(params, kind == "cuda")


def _burn_in_need(params: BurnInParams, kind: Kind) -> Need:
    # The three run one after another in one child: the largest of their needs.
    plan = parts(params, kind)
    return max(_matmul_need(plan.matmul, kind), _bandwidth_need(plan.bandwidth, kind),
               _train_step_need(plan.train_step, kind))


def _burn_in_least(params: BurnInParams, kind: Kind) -> Least:
    plan = parts(params, kind)
    return (_matmul_least(plan.matmul, kind)[0] + _bandwidth_least(plan.bandwidth, kind)[0]
            + _train_step_least(plan.train_step, kind)[0], "params.sustain_s")


def _checkpoint_need(params: ckpt.CheckpointParams, kind: Kind) -> Need:
    # The trained model and its optimizer (a train step's peak), then the loaded copy of the file beside them.
    pred = ckpt.prediction(params, kind == "cuda")
    return pred.memory["total"] + pred.checkpoint.checkpoint_bytes, "params.batch_size"


def _checkpoint_scratch(params: ckpt.CheckpointParams, kind: Kind) -> Need:
    # One file at a time; torch's zip framing adds well under 1% to the tensors (tests/test_probe_io.py).
    return ckpt.prediction(params, kind == "cuda").checkpoint.checkpoint_bytes * 101 // 100, "params.model"


def _checkpoint_least(params: ckpt.CheckpointParams, kind: Kind) -> Least:
    return 0.0, "params.repeats"  # a write and a read per repeat, no warm-up


def _loader_need(params: loader.DataLoaderParams, kind: Kind) -> Need:
    # A batch per mode (x, y int64) while the loader runs; then, without train_tokens_per_s, the train step,
    # whose own timer holds a second flush buffer beside the loader's (admission counts one).
    batches = 2 * loader.batch_bytes(params)
    step = _train_step_need(loader.train_params(params), kind)[0]  # checks the model the child builds
    if params.train_tokens_per_s is not None:
        return batches, "params.batch_size"
    step += flush_bytes(kind, None)
    return max(batches, step), "params.batch_size"


def _loader_scratch(params: loader.DataLoaderParams, kind: Kind) -> Need:
    return loader.file_bytes(params, kind), "params.file_bytes"


def _loader_least(params: loader.DataLoaderParams, kind: Kind) -> Least:
    return _least_seconds(params, 2 if kind == "cuda" else 1)  # pageable, and pinned on CUDA


PROBES: dict[str, Probe] = {probe.name: probe for probe in (
    Probe("matmul", "TFLOP/s and MFU of (m, k) @ (k, n) per shape and dtype", MatmulParams, MatmulResult,
          "app.bench.matmul:run", MATMUL_SIZES, _matmul_need, _matmul_least),
    Probe("bandwidth", "device memory bandwidth, a device-to-device copy, beside the catalogue's",
          BandwidthParams, BandwidthResult, "app.bench.bandwidth:run", BANDWIDTH_BYTES, _bandwidth_need,
          _bandwidth_least),
    Probe("transfer", "host <-> device copies, pageable and pinned, by size", TransferParams, TransferResult,
          "app.bench.transfer:run", TRANSFER_SIZES, _transfer_need, _transfer_least),
    Probe("train_step", "one training step: phase times, tokens/s, MFU, peak memory measured vs predicted",
          TrainStepParams, TrainStepResult, "app.bench.train_step:run", {}, _train_step_need,
          _train_step_least),
    Probe("generate", "prefill and decode with a KV cache: times, tokens/s, decode bandwidth, peak memory "
          "and cache bytes, each beside the roofline's and the serving calculators' prediction",
          GenerateParams, GenerateResult, "app.bench.generate:run", GENERATE_SIZES, _generate_need,
          _generate_least),
    Probe("collectives", "all_reduce, all_gather, reduce_scatter, all_to_all and broadcast over the job's "
          "GPUs (gloo processes on a CPU): algbw and busbw by size as nccl-tests reports them, values "
          "checked, beside a fitted latency-bandwidth model and the catalogue's link",
          CollectivesParams, CollectivesResult, "app.bench.collectives:run", COLLECTIVE_SIZES,
          _collectives_need, _collectives_least),
    Probe("data_parallel_step", "the train_step probe's step over the job's GPUs (gloo processes on a CPU) "
          "with DDP or FSDP2: step time, exposed communication, scaling against one rank, and peak "
          "memory per rank vs the ZeRO stage's prediction",
          DataParallelStepParams, DataParallelStepResult, "app.bench.data_parallel:run", {},
          _data_parallel_need, _data_parallel_least),
    Probe("burn_in", "a GPU's burn-in: the matmul at its best shape (bf16), the device copy and a train "
          "step, each sustained with NVML sampling clocks, power, energy and clock-event reasons",
          BurnInParams, BurnInResult, "app.bench.burn_in:run", {}, _burn_in_need, _burn_in_least),
    Probe("data_loader", "random batches from a memory-mapped token file as the course's get_batch draws "
          "them, copied pageable and pinned: batches/s and tokens/s beside a train step's, and the headroom",
          loader.DataLoaderParams, loader.DataLoaderResult, "app.bench.data_loader:run",
          loader.DATA_LOADER_FILE_BYTES, _loader_need, _loader_least, _loader_scratch),
    Probe("checkpoint", "torch.save of a model's and its optimizer's state dicts: the file's bytes against "
          "the memory engine's checkpoint_bytes, and the write and read GB/s",
          ckpt.CheckpointParams, ckpt.CheckpointResult, "app.bench.checkpoint:run", {}, _checkpoint_need,
          _checkpoint_least, _checkpoint_scratch),
)}

ProbeName = Literal[tuple(PROBES)]  # type: ignore[valid-type]
ProbeResult = Annotated[Union[tuple(p.result for p in PROBES.values())],  # type: ignore[valid-type]  # noqa: UP007
                        Field(discriminator="probe")]
"""Any probe's result, told apart by its `probe` field."""
RESULTS: TypeAdapter[Any] = TypeAdapter(ProbeResult)
"""Parses a result (a child's report, a stored row) into its probe's type, and dumps one."""
