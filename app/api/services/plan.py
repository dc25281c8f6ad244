"""Planning a training run over many GPUs: every valid layout timed and sized, the fastest that fit."""

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import Field

from app.accounting import matmul
from app.accounting.calibration import attention
from app.accounting.calibration import surface as calibration_surface
from app.accounting.calibration.profile import Profile
from app.accounting.calibration.surface import Surface
from app.accounting.errors import InvalidInput
from app.accounting.hardware import peak_flop_per_sec
from app.accounting.plan import energy as plan_energy
from app.accounting.plan import run, training
from app.accounting.plan.search import Limits
from app.accounting.plan.step import Workload
from app.accounting.training import activations, fp8, memory
from app.api.services import energy
from app.api.services.comm import Bandwidth, Latency
from app.api.services.energy import EnergyInputs
from app.api.services.memory import ContextAlgorithm, LossChunks
from app.api.services.time import DEFAULT_MFU, Currency
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, count, number, sequence_length
from app.inputs.schemas import GpuOverridesIn, GpuRef, ModelSpec, accelerator, engine_model
from app.measured.here import Here

Degrees = Annotated[list[count(1, 1_000_000)], Field(min_length=1, max_length=64)]  # type: ignore[valid-type]


class PlanLimits(Input):
    """Values an axis may take; null: every valid one."""

    tensor_parallel: Degrees | None = None  # type: ignore[valid-type]
    pipeline_parallel: Degrees | None = None  # type: ignore[valid-type]
    context_parallel: Degrees | None = Field(  # type: ignore[valid-type]
        None, description="Ranks splitting each sequence (Megatron-LM's --context-parallel-size; Llama 3's CP16 "
                          "at 131k tokens). null: 1, and every degree that leaves each rank at least 8,192 "
                          "tokens of a sequence.")
    first_stage_layers: count(1, 100_000) | None = Field(
        None, description="Decoder layers on the first pipeline stage (Megatron-LM's "
                          "--decoder-first-pipeline-num-layers); null: the search tries the even split (stages "
                          "differ by at most a layer, the first and last shorter) and one with a layer fewer on "
                          "each end.")
    last_stage_layers: count(1, 100_000) | None = Field(
        None, description="Decoder layers on the last pipeline stage (--decoder-last-pipeline-num-layers); the "
                          "middle stages share the rest, differing by at most a layer.")
    expert_parallel: Degrees | None = None  # type: ignore[valid-type]
    micro_batch: Degrees | None = Field(None, description="Sequences per micro-batch.")  # type: ignore[valid-type]
    virtual_stages: Degrees | None = Field(  # type: ignore[valid-type]
        None, description="Model chunks per pipeline rank (Megatron-LM's interleaved schedule).")
    zero_stage: Annotated[list[count(0, 3)], Field(min_length=1, max_length=4)] = [0, 1, 2, 3]  # type: ignore[valid-type]
    recompute: Annotated[list[activations.TrainRecompute], Field(
        min_length=1, max_length=4, description="none, selective (Megatron-LM's attention core), full, and "
                                                "op_selective (torchtitan's op-level policy: dense blocks)")] = [
        "none", "selective", "full"]
    allow_tensor_parallel_across_nodes: bool = False
    sequence_parallel: bool = Field(True, description="With tensor parallelism (Korthikanti et al. 2022).")

    def to_engine(self) -> Limits:
        def tup(v: list | None) -> tuple | None:
            return None if v is None else tuple(v)
        return Limits(tensor_parallel=tup(self.tensor_parallel),
                      pipeline_parallel=tup(self.pipeline_parallel), context_parallel=tup(self.context_parallel),
                      first_stage_layers=self.first_stage_layers, last_stage_layers=self.last_stage_layers,
                      expert_parallel=tup(self.expert_parallel), zero_stage=tuple(self.zero_stage),
                      micro_batch=tup(self.micro_batch), virtual_stages=tup(self.virtual_stages),
                      recompute=tuple(self.recompute),
                      allow_tensor_parallel_across_nodes=self.allow_tensor_parallel_across_nodes,
                      sequence_parallel=self.sequence_parallel)


class TrainingPlanRequest(EnergyInputs):
    model: ModelSpec
    gpu: GpuRef = Field(description="Accelerator id from GET /api/v1/hardware: its peak, memory, node and "
                                   "network.")
    gpu_overrides: GpuOverridesIn | None = None  # type: ignore[valid-type]
    num_gpus: count(1, 1_000_000) = Field(description="GPUs in the run: whole nodes when more than one node.")
    gpus_per_node: count(1, 1024) | None = Field(None, description="null: the catalogue's board (HGX: 8).")
    global_batch_sequences: count(1, 100_000_000) | None = Field(
        None, description="Sequences per optimizer step; or give global_batch_tokens.")
    global_batch_tokens: count(1, 10**13) | None = Field(
        None, description="Tokens per optimizer step, a multiple of seq_len; or give global_batch_sequences.")
    seq_len: sequence_length(1, 10_000_000) | None = Field(
        None, description="Tokens per sequence; null means the model's max_seq_len.")
    precision: memory.TrainPrecision = Field(
        "bf16_mixed", description="As the training memory calculator's. FP8 recipes (fp8_delayed, fp8_current: "
                                  "Transformer Engine's per-tensor scaling; fp8_blockwise: DeepSeek-V3's) run the "
                                  "decoder layers' linear GEMMs at the float8 peak and the rest at bfloat16's, "
                                  "against which MFU is stated.")
    fp8_param_gather: bool = Field(
        False, description="With an FP8 recipe and ZeRO, gather parameters in FP8, 1 byte each (Megatron-LM's "
                           "--fp8-param-gather, torchao's enable_fsdp_float8_all_gather); false: in bf16.")
    optimizer: memory.Optimizer = "adamw"
    compute_efficiency: number(ge=1e-3, le=1) = Field(
        DEFAULT_MFU, description="With matmul_time flat: the share of the dense peak every matmul runs at, "
                                 "communication aside (the time calculator's default MFU).")
    matmul_time: Literal["flat", "shaped"] = Field(
        "flat", description="flat: every matmul at peak x compute_efficiency. shaped: each GEMM timed from its shape "
                            "and dtype at the GPU's achievable matmul rate (MAMF; app/accounting/matmul.py: waves and "
                            "tiles over the SMs, the memory-bound regime, FlashAttention's published rates for the "
                            "attention core). Against published runs (bench/published_training.py) shaped is "
                            "optimistic, as it counts no elementwise work nor what keeps a whole step's GEMMs under "
                            "their isolated rate, so flat stays the default.")
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: every GEMM is timed on the profile's matmul surface (as "
        "matmul_time shaped, with this device's measured times in place of waves at MAMF); the profile must "
        "be the gpu's.")
    context_parallel_algorithm: ContextAlgorithm = "ring"
    activation_offload: bool = Field(
        False, description="As the training memory calculator's: layers' saved tensors in host memory, their "
                           "copies out and back over PCIe overlapping the micro-batch's compute (what outlasts "
                           "it is exposed).")
    loss_chunks: LossChunks = 1  # type: ignore[valid-type]
    overlap_tensor_parallel: bool = Field(
        False, description="Tensor-parallel collectives overlap the GEMMs they feed (Megatron-LM's --tp-comm-overlap, "
                           "torchtitan's async tensor parallelism); false: on the critical path, Megatron-LM's "
                           "default.")
    overlap_data_parallel: bool = Field(
        True, description="Gradient reductions overlap backward and parameter gathers overlap forward; "
                          "false: all data-parallel communication is exposed.")
    intra_node_bytes_per_sec: Bandwidth | None = Field(  # type: ignore[valid-type]
        None, description="Per GPU per direction inside a node; null: the catalogue's node link.")
    intra_node_latency_s: Latency | None = None  # type: ignore[valid-type]
    inter_node_bytes_per_sec: Bandwidth | None = Field(  # type: ignore[valid-type]
        None, description="Per GPU per direction between nodes; null: the catalogue's network / "
                          "gpus_per_node.")
    inter_node_latency_s: Latency | None = None  # type: ignore[valid-type]
    limits: PlanLimits = Field(default_factory=PlanLimits)
    top_k: count(1, 100) = Field(5, description="How many of the fastest fitting layouts to return.")
    include_points: bool = Field(False, description="Also list every evaluated layout's step time and bytes "
                                                    "per GPU (for a scatter).")
    training_tokens: count(1, 10**16) | None = Field(
        None, description="Tokens the whole run trains on: with it, the run's days, GPU-hours, cost, kWh and "
                          "CO2e on the fastest fitting layout (whole steps).")
    price_per_gpu_hour: number(ge=0, le=1e6) | None = Field(
        None, description="Price of one GPU-hour in `currency`, for the run's cost (with training_tokens).")
    currency: Currency = Field("USD", description="ISO 4217 code of the price, echoed, never converted.")


def _pcie(acc) -> float:
    """The host link activation offloading copies over: the catalogue row's PCIe, per direction."""
    bw = acc.interconnect.pcie_bytes_per_sec if acc.interconnect else None
    if bw is None:
        raise InvalidInput("activation_offload", f"{acc.id} has no PCIe figure in the catalogue to copy "
                                                 "activations over")
    return bw


def _surface(body: TrainingPlanRequest, profile: Profile,
             acc: Any) -> tuple[Surface, attention.Rates | None, list[str]]:
    """The profile's matmul surface at the plan's GEMM dtype, its SDPA rates where it measured them,
    and the lines saying where they came from."""
    if profile.catalogue_id != acc.id:
        where = profile.catalogue_id or "a device outside the catalogue"
        raise InvalidInput("calibration", f"{profile.label} was measured on {where}, not {acc.id}")
    if body.matmul_time == "flat" and "matmul_time" in body.model_fields_set:
        raise InvalidInput("calibration", "times each GEMM from the profile's matmul runs: leave matmul_time "
                                          "out, or make it shaped")
    dtype = memory.PEAK_DTYPE[body.precision]
    surf = calibration_surface.fit(list(profile.matmul), dtype)
    jobs = sorted({j for m in profile.matmul if m.dtype == dtype for j in m.jobs})
    measured = attention.rates(profile.attention, dtype)
    core = (f"the attention core at SDPA's rates measured at {measured.shape} (attention jobs "
            f"{', '.join(map(str, measured.jobs))})" if measured else
            "the attention core at FlashAttention's published rate (the profile has no attention runs in "
            f"{dtype})")
    return surf, measured, [f"calibrated: every {dtype} GEMM timed on the matmul surface of {profile.label} "
                            f"(matmul jobs {', '.join(map(str, jobs))}); {core}; every link the catalogue's "
                            "(a prediction)", *profile.flags]


def _calibrated(dev: matmul.MatmulDevice, surf: Surface | None,
                sdpa: attention.Rates | None) -> matmul.MatmulDevice:
    """The part's matmul view with what a profile measured in place of the catalogue's."""
    if sdpa is None:
        return dataclasses.replace(dev, surface=surf)
    return dataclasses.replace(dev, surface=surf, attention_forward_flop_per_sec=sdpa.forward_flop_per_sec,
                               attention_backward_flop_per_sec=sdpa.backward_flop_per_sec)


def plan_training(body: TrainingPlanRequest, here: Here | None = None,
                  profile: Profile | None = None) -> training.TrainingPlan:
    """`here` (read when body.reads_store()) only for a measured power; `profile`, the one
    `calibration` names (read by the caller)."""
    cfg = engine_model(body.model)
    acc = accelerator(body.gpu, body.gpu_overrides)
    seq = body.seq_len or cfg.max_seq_len
    if (body.global_batch_sequences is None) == (body.global_batch_tokens is None):
        raise InvalidInput("global_batch_sequences",
                           "give global_batch_sequences or global_batch_tokens, not both and not neither")
    if body.global_batch_tokens is not None:
        batch, rest = divmod(body.global_batch_tokens, seq)
        if rest or not batch:
            raise InvalidInput("global_batch_tokens", f"{body.global_batch_tokens} is not a whole number of "
                                                      f"{seq}-token sequences")
    else:
        batch = body.global_batch_sequences
    cluster, links = training.cluster(
        acc, num_gpus=body.num_gpus, gpus_per_node=body.gpus_per_node,
        intra=(body.intra_node_bytes_per_sec, body.intra_node_latency_s),
        inter=(body.inter_node_bytes_per_sec, body.inter_node_latency_s))
    peak = peak_flop_per_sec(acc, memory.PEAK_DTYPE[body.precision], field="precision")
    fp8_peak = peak_flop_per_sec(acc, "float8_e4m3fn", field="precision") if fp8.is_fp8(body.precision) else None
    if body.fp8_param_gather and fp8_peak is None:
        raise InvalidInput("fp8_param_gather", "needs an FP8 recipe as the precision")
    surf, sdpa, calibrated = _surface(body, profile, acc) if profile is not None else (None, None, [])
    shaped = body.matmul_time == "shaped" or surf is not None
    if shaped and "compute_efficiency" in body.model_fields_set:
        raise InvalidInput("compute_efficiency", "applies with matmul_time flat; shaped times each GEMM itself")
    w = Workload(cfg, acc, cluster, global_batch=batch, seq_len=seq, precision=body.precision,
                 optimizer=body.optimizer, peak_flop_per_sec=peak,
                 compute_efficiency=None if shaped else body.compute_efficiency,
                 overlap_data_parallel=body.overlap_data_parallel,
                 context_parallel_algorithm=body.context_parallel_algorithm, fp8_peak_flop_per_sec=fp8_peak,
                 fp8_param_gather=body.fp8_param_gather, overlap_tensor_parallel=body.overlap_tensor_parallel,
                 activation_offload=body.activation_offload, loss_chunks=body.loss_chunks,
                 pcie_bytes_per_sec=_pcie(acc) if body.activation_offload else None,
                 matmul=_calibrated(matmul.device(acc, memory.PEAK_DTYPE[body.precision], field="precision"),
                                    surf, sdpa) if shaped else None,
                 fp8_matmul=matmul.device(acc, "float8_e4m3fn", field="precision") if shaped and fp8_peak else None)
    plan = training.plan(w, body.limits.to_engine(), top_k=body.top_k, points=body.include_points,
                         links=links)
    plan.assumptions = calibrated + plan.assumptions
    if body.power_watts is not None or acc.board_power_watts is not None:  # else no energy: as the time's
        plan.energy = plan_energy.cost(
            [*plan.best, plan.least_memory], gpus=plan.num_gpus, tokens_per_step=plan.tokens_per_step,
            power=energy.power(body, acc, here), pue=body.pue, pue_source=energy.pue_source(body),
            grid=energy.grid(body), training_tokens=body.training_tokens)
    if body.training_tokens is not None and plan.best:
        top = plan.best[0]
        plan.run = run.length(training_tokens=body.training_tokens, tokens_per_step=plan.tokens_per_step,
                              step_seconds=top.step_seconds, mfu=top.mfu, gpus=plan.num_gpus,
                              price_per_gpu_hour=body.price_per_gpu_hour, currency=body.currency)
    return plan
