"""The matmul probe: TFLOP/s and MFU of (m, k) @ (k, n) per shape and dtype, each beside the
catalogue's dense peak, and on its job page a roofline under this device's measured ceilings.
Its torch side is app/bench/matmul.py."""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from app import numbers
from app.accounting import dtypes, flops
from app.accounting.calibration import surface
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.fields import Input, count
from app.probes import energy, sustained
from app.probes.base import Kind, Least, Need, Probe, sustained_least, timer_least
from app.probes.faces import Faces, Fieldset, Metric, Row, Table, compare_lines, skipped, where
from app.probes.faces import Input as Control
from app.probes.ledger import Ledger, Pair, datasheet_peak, positive
from app.probes.params import SustainParams, rule
from app.probes.past import Past
from app.probes.results import Environment, Skipped, Stats
from app.probes.sustained import Sustained

# float32 runs with TF32 off; "tfloat32" is float32 storage with TF32 tensor cores allowed.
MatmulDtype = Literal["float32", "tfloat32", "bfloat16", "float16", "float8_e4m3fn"]

MATMUL_DTYPES: tuple[str, ...] = MatmulDtype.__args__  # type: ignore[attr-defined]


class MatmulShape(Input):
    """(m, k) @ (k, n)."""

    m: count(1, 65_536)
    k: count(1, 65_536)
    n: count(1, 65_536)


class MatmulParams(SustainParams):
    sweep: Literal["squares", "quick", "custom"] = Field(
        "squares", description="squares: m=k=n from 1024 to 16384 (CPU: 128 to 512); quick: m from "
        "256 in steps of 256 to 4096 with n=k=4096 (CPU: m 32..256, n=k=256); custom: `shapes`.")
    shapes: Annotated[list[MatmulShape], Field(max_length=256)] = Field(
        default_factory=list, validate_default=True, description="The shapes for sweep=custom.")
    dtypes: Annotated[list[MatmulDtype], Field(min_length=1, max_length=5)] | None = Field(
        None, description="Default: every dtype the device runs (float8 needs compute capability 8.9+).")

    @field_validator("shapes")
    @classmethod
    def _shapes(cls, value: list, info: ValidationInfo) -> list:
        if (info.data.get("sweep") == "custom") != bool(value):
            raise rule("give shapes with sweep=custom, and only then")
        return value


@dataclass(frozen=True)
class MatmulSizes:
    """A device kind's default matmul sweeps and dtypes."""

    squares: tuple[int, ...]
    """m = k = n for sweep=squares."""
    quick_step: int
    """sweep=quick: m from quick_step to quick_width in steps of quick_step, n = k = quick_width."""
    quick_width: int
    dtypes: tuple[str, ...]


# By device kind: the full sweeps on CUDA, small ones on CPU (so the suite runs without a GPU).
MATMUL_SIZES = {
    "cuda": MatmulSizes(squares=(1024, 2048, 4096, 8192, 16384), quick_step=256, quick_width=4096,
                        dtypes=MATMUL_DTYPES),
    "cpu": MatmulSizes(squares=(128, 256, 512), quick_step=32, quick_width=256,
                       dtypes=("float32", "bfloat16")),
}


def matmul_dtypes(params: MatmulParams, kind: str) -> tuple[str, ...]:
    return tuple(params.dtypes or MATMUL_SIZES[kind].dtypes)


def matmul_shapes(params: MatmulParams, kind: str) -> list[tuple[int, int, int]]:
    """(m, k, n) per measurement: the sweep's, at the device kind's scale."""
    if params.sweep == "custom":
        return [(s.m, s.k, s.n) for s in params.shapes]
    sizes = MATMUL_SIZES[kind]
    if params.sweep == "squares":
        return [(s, s, s) for s in sizes.squares]
    step, width = sizes.quick_step, sizes.quick_width
    return [(m, width, width) for m in range(step, width + 1, step)]


def matmul_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """A, B and the output (bfloat16 for float8) resident at once."""
    size = dtypes.lookup(dtype).storage_bytes
    out = 2 if dtype == "float8_e4m3fn" else size
    return (m * k + k * n) * size + m * n * out


def largest_matmul(shapes: list[tuple[int, int, int]], names: list[str]) -> tuple[int, int]:
    """(index of the shape, bytes) of the most memory any one measurement needs."""
    return max(((i, matmul_bytes(*s, d)) for i, s in enumerate(shapes) for d in names), key=lambda x: x[1])


@dataclass(slots=True)
class MatmulPoint:
    m: int
    k: int
    n: int
    dtype: str
    flops: int
    """2*m*k*n, from the calculators."""
    time: Stats
    flop_per_sec: float
    """flops / median time."""
    best_flop_per_sec: float
    """flops / best time."""
    peak_flop_per_sec: float | None
    """The catalogue's dense peak for this dtype; null when the device is not listed."""
    mfu: float | None
    """flop_per_sec / peak_flop_per_sec."""
    predicted_seconds_at_peak: float | None

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class MatmulResult:
    probe: Literal["matmul"]
    environment: Environment
    points: list[MatmulPoint]
    best: dict[str, MatmulPoint]
    """Per dtype, the shape with the highest median FLOP/s."""
    skipped: list[Skipped]
    sustained: Sustained | None = None
    """With sustain_s: the best shape of the first dtype, run back to back."""

    __pydantic_config__ = RECORD


def need(params: MatmulParams, kind: Kind) -> Need:
    i, most = largest_matmul(matmul_shapes(params, kind), list(matmul_dtypes(params, kind)))
    return most, f"params.shapes.{i}" if params.sweep == "custom" else "params.sweep"


def least_seconds(params: MatmulParams, kind: Kind) -> Least:
    # Only the dtypes certain to run: float8 needs a compute capability NVML does not tell the
    # server, and tfloat32 on a CPU is skipped (app/bench/matmul.py).
    sure = [d for d in matmul_dtypes(params, kind)
            if d != "float8_e4m3fn" and (kind == "cuda" or d != "tfloat32")]
    return sustained_least(timer_least(params, len(matmul_shapes(params, kind)) * len(sure)), params)


# --- faces --------------------------------------------------------------------------------------

def shape(p: Any) -> str:
    return f"{p.m}×{p.k}×{p.n}"


def headline(result: MatmulResult) -> list[Metric]:
    out = []
    for dtype, p in result.best.items():
        out += [Metric(f"{dtype}/median", f"{dtype}: best shape, median", p.flop_per_sec, "flop_per_sec",
                       shape(p)),
                Metric(f"{dtype}/best", f"{dtype}: best shape, best iteration", p.best_flop_per_sec,
                       "flop_per_sec", shape(p))]
        if p.mfu is not None:
            out.append(Metric(f"{dtype}/mfu", f"{dtype}: best shape, MFU (median)", p.mfu, "fraction"))
    return out + sustained.metrics(result.sustained)


def tables(result: MatmulResult) -> list:
    joules = energy.shown(p.time for p in result.points)
    best = {(p.m, p.k, p.n, p.dtype) for p in result.best.values()}
    ms = numbers.ms
    rows = [[f"{p.m}x{p.k}x{p.n}" + (" *" if (p.m, p.k, p.n, p.dtype) in best else ""),
             p.dtype, f"{p.flops:,}", ms(p.time.median), ms(p.time.best), ms(p.predicted_seconds_at_peak),
             numbers.per(p.flop_per_sec, 1e12), numbers.per(p.best_flop_per_sec, 1e12),
             numbers.per(p.peak_flop_per_sec, 1e12), numbers.percent(p.mfu)]
            + (energy.cells(p.time, rate="GFLOP/J") if joules else []) for p in result.points]
    headers = ["m x k x n", "dtype", "FLOPs", "median ms", "best iteration ms", "at peak ms",
               "TFLOP/s (median)", "TFLOP/s (best iteration)", "peak TFLOP/s", "MFU (median)"]
    if joules:
        headers += energy.headers("iter", "GFLOP/J")
    return [where(result), Table(headers, rows, 2), "* the best shape per dtype (highest median); median: "
            "over the median iteration's time, best iteration: over the fastest; at peak: the time at the "
            "catalogue's dense peak", *skipped(result), *energy.note(result),
            *sustained.tables(result.sustained, "best shape")]


def charts(result: MatmulResult, past: Past) -> dict[str, dict]:
    series: dict[str, list] = {}
    peaks = {}
    for p in result.points:
        series.setdefault(p.dtype, []).append({"x": p.m, "y": p.flop_per_sec / 1e12})
        peaks[p.dtype] = None if p.peak_flop_per_sec is None else p.peak_flop_per_sec / 1e12
    return {"sizes": {"type": "matmul_sizes", "series": series, "peaks": peaks,
                      "caption": _sizes_caption(peaks, result.environment.device_name)},
            "roofline": roofline(result, past.calibration(result.environment))}


def _sizes_caption(peaks: dict[str, float | None], device_name: str) -> str:
    """Says what the chart draws: a dashed line only for a dtype the catalogue has a peak for."""
    drawn = [d for d, peak in peaks.items() if peak is not None]
    lacking = [d for d, peak in peaks.items() if peak is None]
    said = "TFLOP/s (median) against m, per dtype."
    if drawn:
        said += f" Dashed lines: the catalogue's dense peak for {', '.join(drawn)}."
    if lacking and not drawn:
        said += f" No catalogue peak for this device ({device_name}), so no peak line."
    elif lacking:
        said += f" No catalogue peak for {', '.join(lacking)}."
    return said


def roofline(result: MatmulResult, calib: Any) -> dict:
    """Measured points at their arithmetic intensity (the matmul calculator's), under the ceilings
    this device has measured (app/measured/calibration.py, the same device as the result's): its
    best recent bandwidth run and its best matmul (the best dtype's); a caption naming the
    ceilings drawn and those missing."""
    points = []
    for p in result.points:
        dtype = "float32" if p.dtype == "tfloat32" else p.dtype  # TF32 stores float32
        intensity = flops.matmul(p.m, p.k, p.n, dtype=dtype).arithmetic_intensity
        points.append({"x": intensity, "y": p.flop_per_sec / 1e12, "dtype": p.dtype})
    bandwidth = calib.bandwidth
    gbs = None if bandwidth is None else bandwidth.bytes_per_sec / 1e9
    top = max(calib.matmul.values(), key=lambda m: m.flop_per_sec, default=None)
    where_ = {"device": result.environment.device}
    missing = []
    if bandwidth is None:
        missing.append({"probe": "bandwidth", "launch": {"probe": "bandwidth", **where_}, "message":
                        "No bandwidth run on this device yet, so the roofline has no memory ceiling."})
    if top is None:
        missing.append({"probe": "matmul", "launch": {"probe": "matmul", **where_}, "message":
                        "No matmul measured on this device yet, so the roofline has no compute ceiling."})
    drawn = []
    if bandwidth is not None:
        drawn.append(f"the memory ceiling, {numbers.sig(gbs)} GB/s (bandwidth run #{bandwidth.job_id})")
    if top is not None:
        drawn.append(f"the compute ceiling, {numbers.tflops(top.flop_per_sec)} ({top.dtype}, median, "
                     f"best shape, run #{top.job_id})")
    not_drawn = {"bandwidth": "the memory ceiling (no bandwidth run on this device)",
                 "matmul": "the compute ceiling (no matmul on this device)"}
    lacking = "; ".join(not_drawn[m["probe"]] for m in missing)
    caption = ("Roofline: TFLOP/s (median) of each shape against its arithmetic intensity (FLOPs per byte)"
               + (", under " + " and ".join(drawn) if drawn else "") + "."
               + (f" Not drawn: {lacking}." if missing else ""))
    return {"type": "roofline", "points": points, "bandwidth_gb_per_sec": gbs,
            "compute_tflop_per_sec": None if top is None else top.flop_per_sec / 1e12, "missing": missing,
            "caption": caption}


def differences(a: MatmulResult, b: MatmulResult) -> list[str]:
    said = []
    shapes_a, shapes_b = ({shape(p) for p in r.points} for r in (a, b))
    if shapes_a != shapes_b:
        only_a, only_b = sorted(shapes_a - shapes_b), sorted(shapes_b - shapes_a)
        said.append("shapes: " + "; ".join(
            f"only {run} has {', '.join(s)}" for run, s in (("A", only_a), ("B", only_b)) if s))
    dtypes_a, dtypes_b = (", ".join(sorted({p.dtype for p in r.points})) for r in (a, b))
    if dtypes_a != dtypes_b:
        said.append(f"dtypes: A {dtypes_a}, B {dtypes_b}")
    return said


def overlay(a: MatmulResult, b: MatmulResult) -> dict:
    return compare_lines(a, b, lambda r: r.points, lambda p: p.dtype, lambda p: p.m,
                         lambda p: p.flop_per_sec / 1e12, x_label="m (rows of A)", y_label="TFLOP/s (median)",
                         caption="TFLOP/s (median) against m, per dtype: run A solid, run B dashed.")


def _assemble(read: dict[str, Any]) -> dict[str, Any]:
    """The one-shape field ("m, k, n") into shapes; the dtypes only when some are ticked."""
    out = {"sweep": read.get("sweep", "squares")}
    if read.get("dtypes"):
        out["dtypes"] = read["dtypes"]
    if out["sweep"] == "custom":
        out["shapes"] = [dict(zip("mkn", read.get("shape", []), strict=False))]
    return out


FORM = (Fieldset("matmul", (
    Row("Shapes", (Control("sweep", kind="select", value="squares", options=(
        ("squares", "squares"), ("quick", "quick sweep"), ("custom", "one shape"))),)),
    Row("m, k, n (one shape)", (Control("shape", kind="list", value="256, 256, 256",
                                        shown_when=("sweep", "custom")),)),
    Row("dtypes", (Control("dtype", kind="checks", param="dtypes", options=MATMUL_DTYPES,
                           value="float32,bfloat16"),)),
), _assemble),)

def _datasheet_pairs(params: Any, result: MatmulResult) -> list[Pair]:
    """Each shape's time at the catalogue's dense peak (or this CPU's), as its table shows it."""
    pairs = []
    for p in result.points:
        at_peak = p.predicted_seconds_at_peak
        if at_peak is None and (peak := datasheet_peak(result.environment, p.dtype)) is not None:
            at_peak = p.flops / peak[0]
        if at_peak is not None:
            pairs.append(Pair("gemm_seconds", "time", at_peak, p.time.median, f"{p.dtype} {shape(p)}"))
    return positive(pairs)


def _calibrated_pairs(params: Any, result: MatmulResult, profile: Profile) -> list[Pair]:
    """Each shape's time on the profile's surface (its call cost alpha included, as a run times it)."""
    pairs = []
    for dtype in {p.dtype for p in result.points}:
        try:
            surf = surface.fit(list(profile.matmul), dtype)
        except InvalidInput:
            continue
        pairs += [Pair("gemm_seconds", "time", surf.alpha_s + surf.seconds(p.m, p.k, p.n), p.time.median,
                       f"{p.dtype} {shape(p)}") for p in result.points if p.dtype == dtype]
    return positive(pairs)


PROBE = Probe(
    "matmul", "TFLOP/s and MFU of (m, k) @ (k, n) per shape and dtype", MatmulParams, MatmulResult,
    "app.bench.matmul:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, charts=charts, page="probes/matmul.html", form=FORM,
                differences=differences, overlay=overlay, sustained="The best shape"),
    ledger=Ledger(_datasheet_pairs, _calibrated_pairs))
