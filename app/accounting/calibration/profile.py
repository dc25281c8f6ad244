"""A calibration profile: what one device model measured, each figure with the jobs it came from
and how far those runs spread. Seconds, bytes and FLOP/s unless a name says otherwise.

A profile is data: app/measured/profile.py builds it from stored probe results, the API stores,
exports and imports it as JSON, and the calculators read it (surface.py, step.py). Its `version`
counts the profiles built or imported for the device model, so an answer can name the one it used.
"""

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen

from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

JobId = Annotated[int, Ge(1), Le(2**53)]
Jobs = tuple[JobId, ...]
Spread = Annotated[float, Ge(0), Le(1e6)]
Rate = Annotated[float, Gt(0), Le(1e18)]
"""Bounds no measurement reaches, which keep every time derived from an imported profile finite
(an import is refused outside them, naming the field)."""

WIDE_SPREAD = 0.25
"""Runs of one figure whose (largest - smallest) / median exceeds this disagree more than a quiet
device does (a matmul's run-to-run spread on a quiet GPU or CPU is a few percent): the profile
flags the figure (`flags`), and a calibrated answer repeats the flag."""


@dataclass(frozen=True, slots=True)
class Figure:
    """One fitted or measured value."""

    value: Rate
    unit: str
    """"bytes/s", "s" (per op, per launch), "ratio" or "W"."""
    spread: Spread
    """(largest - smallest) / median over the runs it was chosen from; 0 for one run."""
    jobs: Jobs
    """The probe jobs it came from (pages: /benchmarks/jobs/{id})."""
    source: str
    """Which probe and which figure of its result."""

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class MatmulSample:
    """One (m, k) @ (k, n) shape in one dtype: the median over jobs of each run's median time."""

    dtype: str
    m: Annotated[int, Ge(1), Le(1 << 20)]
    k: Annotated[int, Ge(1), Le(1 << 20)]
    n: Annotated[int, Ge(1), Le(1 << 20)]
    seconds: Annotated[float, Gt(0), Le(1e4)]
    spread: Spread
    jobs: Jobs

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class AttentionSample:
    """One scaled-dot-product attention shape in one dtype (the attention probe): q, k and v of
    (batch, heads, seq_len, head_dim); the median over jobs of each run's median seconds."""

    dtype: str
    batch: Annotated[int, Ge(1), Le(1 << 20)]
    heads: Annotated[int, Ge(1), Le(1 << 20)]
    seq_len: Annotated[int, Ge(1), Le(1 << 24)]
    head_dim: Annotated[int, Ge(1), Le(1 << 16)]
    causal: bool
    forward_seconds: Annotated[float, Gt(0), Le(1e4)]
    forward_backward_seconds: Annotated[float, Gt(0), Le(1e4)]
    """The forward and its backward (dq, dk, dv), one after the other."""
    spread: Spread
    jobs: Jobs

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class StepOverheads:
    """A train step's time beyond its GEMMs and attention core, fitted over train_step runs
    (step.py's model): seconds per eager op, per byte of saved activations, per byte the optimizer
    reads and writes. Least squares of relative error, coefficients held non-negative (lsq.py)."""

    precision: str
    """The train_step precision the runs trained in (fp32, bf16_autocast)."""
    seconds_per_op: Annotated[float, Ge(0), Lt(1)]
    seconds_per_activation_byte: Annotated[float, Ge(0), Lt(1)]
    seconds_per_optimizer_byte: Annotated[float, Ge(0), Lt(1)]
    rms_relative_error: Spread
    """The fit's root-mean-square relative error over its own runs: its spread."""
    jobs: Jobs

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class CollectiveFit:
    """t = latency x ring steps + bus bytes / bus bandwidth over one collectives run's sizes
    (app/accounting/comm/collectives.fit_link)."""

    collective: str
    ranks: Annotated[int, Ge(1), Le(1_000_000)]
    latency_s: Annotated[float, Ge(0), Le(10)]
    """Per ring step."""
    bus_bytes_per_s: Rate
    rms_relative_error: Spread
    jobs: Jobs

    __pydantic_config__ = RECORD


DeviceKind = Literal["cuda", "cpu"]
FIGURES = ("copy_bytes_per_s", "host_to_device_bytes_per_s", "device_to_host_bytes_per_s", "launch_eager_s",
           "launch_graph_s", "checkpoint_write_bytes_per_s", "checkpoint_read_bytes_per_s",
           "loader_tokens_per_s",
           "sustained_ratio", "power_watts")
"""A profile's single-valued figures (Figure), by field name."""


@dataclass(frozen=True, slots=True)
class Profile:
    """What one device model measured. Every figure names its jobs; `flags` says which figures
    rest on runs that disagree, and `left_out` which runs were not used and why."""

    device_model: str
    """The device name its runs report (torch.cuda.get_device_name, or the CPU's model name)."""
    device_kind: DeviceKind
    catalogue_id: str | None
    """The hardware catalogue's entry (null for CPUs and unlisted parts)."""
    version: Annotated[int, Ge(0), Le(2**31)]
    """1 for the first profile of this device model, then one more for each built or imported."""
    created_at: str
    """ISO 8601, UTC."""
    matmul: tuple[MatmulSample, ...]
    device: Annotated[str, MinLen(1), MaxLen(200)] | None = None
    """Null: built from every device of the model. Else the one device its runs ran on (a GPU's NVML
    UUID, "<host>:cpu"): an outlier's own profile, which `calibration` names by that device."""
    datasheet_peak_flop_per_sec: dict[str, Annotated[float, Ge(1), Le(1e18)]] = field(default_factory=dict)
    """By dtype: the catalogue's dense peaks, or for a CPU cores x clock x FLOPs a cycle
    (app/accounting/cpu.py); what a datasheet-default prediction runs at."""
    copy_bytes_per_s: Figure | None = None
    """Device-to-device copy, bytes read plus written (bandwidth probe)."""
    host_to_device_bytes_per_s: Figure | None = None
    device_to_host_bytes_per_s: Figure | None = None
    launch_eager_s: Figure | None = None
    """Per op of an eager decode step that launches bound (generate probe): the host's cost of one op."""
    launch_graph_s: Figure | None = None
    """Per kernel of a graph-replayed decode step (generate probe, graph mode)."""
    checkpoint_write_bytes_per_s: Figure | None = None
    """A checkpoint written to the server's disk (checkpoint probe)."""
    checkpoint_read_bytes_per_s: Figure | None = None
    loader_tokens_per_s: Figure | None = None
    """Tokens a second a data loader drew and copied to the device, its fastest copy mode (the
    data_loader probe)."""
    train_step: tuple[StepOverheads, ...] = ()
    attention: tuple[AttentionSample, ...] = ()
    """SDPA's measured shapes (the attention probe): attention.py times the attention core from them."""
    collectives: tuple[CollectiveFit, ...] = ()
    sustained_ratio: Figure | None = None
    """Sustained over burst rate (the sustained runs' last window over their first)."""
    power_watts: Figure | None = None
    flags: tuple[str, ...] = ()
    """Figures resting on runs that disagree (spread over WIDE_SPREAD): a calibrated answer repeats them."""
    left_out: tuple[str, ...] = ()
    """Runs not used, and why (contention, wide timings: app/measured/doubts.py)."""
    id: Annotated[int, Ge(1), Le(2**53)] | None = None
    """The store's id; null in an exported file until it is imported."""
    imported_from: str | None = None
    """Where an imported profile was built (its device model, version and created_at there)."""

    __pydantic_config__ = RECORD

    @property
    def label(self) -> str:
        where = f"profile {self.id}" if self.id is not None else "an unsaved profile"
        device = "" if self.device is None else f", device {self.device}"
        return f"{where} ({self.device_model}{device}, version {self.version})"

    def job_ids(self) -> set[int]:
        """Every job any figure of the profile came from: a job among them never scores it."""
        figures = [getattr(self, name) for name in FIGURES]
        return ({j for s in self.matmul for j in s.jobs}
                | {j for f in figures if f is not None for j in f.jobs}
                | {j for f in self.train_step for j in f.jobs}
                | {j for s in self.attention for j in s.jobs}
                | {j for f in self.collectives for j in f.jobs})

    def overheads(self, precision: str, *, field: str = "calibration") -> StepOverheads:
        for fit in self.train_step:
            if fit.precision == precision:
                return fit
        have = ", ".join(f.precision for f in self.train_step) or "none"
        raise InvalidInput(field, f"{self.label} has no train step fit at precision {precision} (it has "
                                  f"{have}): run train_step jobs at that precision, or rebuild the profile")


def spread(values: list[float]) -> float:
    """(largest - smallest) / median; 0 for one value."""
    ordered = sorted(values)
    mid = ordered[len(ordered) // 2] if len(ordered) % 2 else (ordered[len(ordered) // 2 - 1]
                                                                 + ordered[len(ordered) // 2]) / 2
    return 0.0 if len(values) < 2 or mid <= 0 else (ordered[-1] - ordered[0]) / mid


def median(values: list[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


MAX_DIMENSION = 1 << 20
MAX_SECONDS = 1e4
MAX_FIGURE = 1e18
"""Bounds no measurement reaches (a GEMM side, a GEMM's seconds, a rate), which keep every time
derived from an imported profile finite."""


def check(p: Profile) -> None:
    """InvalidInput naming the first field of an imported profile that no measurement could give:
    a profile without matmul data, a non-positive or non-finite time, size or rate."""
    if not p.matmul:
        raise InvalidInput("matmul", "the profile has no matmul data: a calibrated answer times every GEMM "
                                     "from it (run the matmul probe, then build the profile)")
    for i, s in enumerate(p.matmul):
        for name in ("m", "k", "n"):
            if not 1 <= getattr(s, name) <= MAX_DIMENSION:
                raise InvalidInput(f"matmul.{i}.{name}",
                                   f"must be 1 to {MAX_DIMENSION}, got {getattr(s, name)}")
        if not (math.isfinite(s.seconds) and 0 < s.seconds <= MAX_SECONDS):
            raise InvalidInput(f"matmul.{i}.seconds",
                               f"must be a positive number of seconds up to {MAX_SECONDS:g}, got {s.seconds}")
    for name in FIGURES:
        fig = getattr(p, name)
        if fig is not None and not (math.isfinite(fig.value) and 0 < fig.value <= MAX_FIGURE):
            raise InvalidInput(f"{name}.value",
                               f"must be a positive number up to {MAX_FIGURE:g}, got {fig.value}")
    for i, a in enumerate(p.attention):
        for name in ("forward_seconds", "forward_backward_seconds"):
            value = getattr(a, name)
            if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
                raise InvalidInput(f"attention.{i}.{name}",
                                   f"must be a positive number of seconds up to {MAX_SECONDS:g}, got {value}")
    for i, fit in enumerate(p.train_step):
        for name in ("seconds_per_op", "seconds_per_activation_byte", "seconds_per_optimizer_byte"):
            value = getattr(fit, name)
            if not (math.isfinite(value) and 0 <= value < 1):
                raise InvalidInput(f"train_step.{i}.{name}", f"must be a non-negative number of seconds "
                                                             f"under 1, got {value}")
    for dtype, peak in p.datasheet_peak_flop_per_sec.items():
        if not (math.isfinite(peak) and 1 <= peak <= MAX_FIGURE):
            raise InvalidInput(f"datasheet_peak_flop_per_sec.{dtype}", f"must be 1 to {MAX_FIGURE:g} FLOP/s, "
                                                                       f"got {peak}")
