"""A run's headline figures, named once for every page: the job page shows them, the compare
page sets two runs' side by side with B - A and B / A, and overlays their curves.

Words, one per meaning (the CLI's tables use the same):
- "median": FLOPs (or bytes, or tokens) over the median timed iteration's seconds;
- "best iteration": the same over the fastest iteration's seconds;
- "best shape": per dtype, the matmul shape with the highest median.
"""

from dataclasses import dataclass
from typing import Any, Literal

from app.accounting.units import human_bytes
from app.probes.burn_in import BurnInResult
from app.probes.parallel_results import CollectivesResult, DataParallelStepResult
from app.probes.results import (
    BandwidthResult,
    GenerateResult,
    MatmulResult,
    TrainStepResult,
    TransferResult,
)
from app.probes.sustained import Sustained
from app.web import io_pages, numbers

Kind = Literal["flop_per_sec", "seconds", "gb_per_sec", "tokens_per_sec", "fraction", "signed_fraction",
               "watts", "ratio"]


@dataclass(slots=True)
class Metric:
    key: str
    """Names the same figure in two runs of one probe."""
    label: str
    value: float | None
    kind: Kind
    detail: str = ""
    """Where the figure was taken (a shape, a size), shown beside it on the job page."""

    @property
    def text(self) -> str:
        return show(self.value, self.kind)


def show(value: float | None, kind: Kind) -> str:
    if value is None:
        return "n/a"
    if kind == "flop_per_sec":
        return numbers.tflops(value)
    if kind == "seconds":
        return f"{numbers.sig(value * 1e3)} ms"
    if kind == "gb_per_sec":
        return f"{numbers.sig(value)} GB/s"
    if kind == "tokens_per_sec":
        return f"{numbers.sig(value)} tokens/s"
    if kind == "watts":
        return f"{numbers.sig(value)} W"
    if kind == "ratio":
        return f"{numbers.sig(value)}×"
    return numbers.percent(value, signed=kind == "signed_fraction")


def delta(a: float | None, b: float | None, kind: Kind) -> str:
    """B - A in the figure's unit; fractions in percentage points."""
    if a is None or b is None:
        return "n/a"
    d = b - a
    if kind in ("fraction", "signed_fraction"):
        return f"{numbers.percent(d, signed=True)[:-1]} pp"
    text = show(d, kind)
    return "+" + text if d > 0 else text


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or a == 0 else f"{numbers.sig(b / a)}×"


def _shape(p: Any) -> str:
    return f"{p.m}×{p.k}×{p.n}"


def _transfer_key(t: Any) -> str:
    return f"{t.direction.replace('_', ' ')}, {t.host_memory}{', non_blocking' if t.non_blocking else ''}"


def sustained(s: Sustained | None, prefix: str = "") -> list[Metric]:
    """A sustained run's rate and average power (app/probes/sustained.py), when it ran."""
    if s is None:
        return []
    where = f"{numbers.sig(s.seconds)} s"
    rate = (Metric(f"{prefix}sustained", f"{prefix}sustained", s.flop_per_sec, "flop_per_sec", where)
            if s.flop_per_sec is not None else
            Metric(f"{prefix}sustained", f"{prefix}sustained", None if s.bytes_per_sec is None
                   else s.bytes_per_sec / 1e9, "gb_per_sec", where))
    watts = [] if s.average_power_watts is None else [
        Metric(f"{prefix}watts", f"{prefix}average power, sustained", s.average_power_watts, "watts")]
    return [rate, *watts]


def headline(result: Any) -> list[Metric]:
    """The figures a person compares runs by, in reading order."""
    if isinstance(result, BurnInResult):
        return [*sustained(result.matmul.sustained, "matmul "),
                *sustained(result.bandwidth.sustained, "copy "),
                *sustained(result.train_step.sustained, "train step "),
                Metric("mfu", "train step MFU (median step)", result.train_step.mfu, "fraction")]
    held = result.sustained if isinstance(result, MatmulResult | BandwidthResult | TrainStepResult) else None
    return [*_headline(result), *sustained(held)]


def _headline(result: Any) -> list[Metric]:
    if isinstance(result, MatmulResult):
        out = []
        for dtype, p in result.best.items():
            out += [Metric(f"{dtype}/median", f"{dtype}: best shape, median", p.flop_per_sec, "flop_per_sec",
                           _shape(p)),
                    Metric(f"{dtype}/best", f"{dtype}: best shape, best iteration", p.best_flop_per_sec,
                           "flop_per_sec", _shape(p))]
            if p.mfu is not None:
                out.append(Metric(f"{dtype}/mfu", f"{dtype}: best shape, MFU (median)", p.mfu, "fraction"))
        return out
    if isinstance(result, BandwidthResult):
        pct = result.percent_of_catalogue
        return [Metric("median", "copy, median", result.gb_per_sec, "gb_per_sec"),
                Metric("best", "copy, best iteration", result.best_gb_per_sec, "gb_per_sec"),
                *([] if pct is None else [Metric("catalogue", "of the catalogue's bandwidth (median)",
                                                 pct / 100, "fraction")])]
    if isinstance(result, TransferResult):
        largest = max((t.size_bytes for t in result.points), default=0)
        return [Metric(f"{_transfer_key(t)}@{t.size_bytes}", f"{_transfer_key(t)}, median",
                       t.gb_per_sec, "gb_per_sec", human_bytes(t.size_bytes, binary=False))
                for t in result.points if t.size_bytes == largest]
    if isinstance(result, TrainStepResult):
        r = result
        return [Metric("tokens", "tokens/s (median step)", r.tokens_per_sec, "tokens_per_sec"),
                Metric("achieved", "achieved, median step", r.achieved_flop_per_sec, "flop_per_sec"),
                Metric("mfu", "MFU (median step)", r.mfu, "fraction"),
                Metric("step", "step time, median", r.step.median, "seconds"),
                Metric("forward", "forward, median", r.forward.median, "seconds"),
                Metric("backward", "backward, median", r.backward.median, "seconds"),
                Metric("optimizer", "optimizer step, median", r.optimizer_step.median, "seconds"),
                Metric("memory", "peak memory, predicted vs measured", r.memory.relative_error,
                       "signed_fraction")]
    if isinstance(result, GenerateResult):
        return _generate_headline(result)
    if isinstance(result, CollectivesResult):
        out = []
        for op in dict.fromkeys(p.collective for p in result.points):
            p = max((p for p in result.points if p.collective == op), key=lambda p: p.size_bytes)
            size = human_bytes(p.size_bytes, binary=True)
            out.append(Metric(f"{op}/busbw", f"{op}: busbw, largest size (median)",
                              p.busbw_bytes_per_sec / 1e9, "gb_per_sec", size))
        return out
    io = io_pages.headline(result, Metric)  # data_loader, checkpoint
    if io is not None:
        return io
    if isinstance(result, DataParallelStepResult):
        r = result
        where = f"{r.strategy}, {r.ranks} ranks"
        return [Metric("step", "step time, median", r.step.median, "seconds", where),
                Metric("exposed", "exposed communication (vs one rank)", r.exposed_communication_s,
                       "seconds"),
                Metric("scaling", "scaling efficiency (vs one rank)", r.scaling_efficiency, "fraction"),
                Metric("tokens", "tokens/s per rank (median step)", r.tokens_per_sec_per_rank,
                       "tokens_per_sec"),
                Metric("memory", "peak memory per rank, predicted vs measured", r.memory.relative_error,
                       "signed_fraction")]
    return []


def _generate_headline(r: GenerateResult) -> list[Metric]:
    """Decode at the largest batch (its longest context), prefill at the longest prompt, and the
    memory prediction's worst point."""
    out = []
    if r.decode:
        d = max(r.decode, key=lambda d: (d.batch_size, d.context))
        where = f"batch {d.batch_size}, context {d.context}"
        out += [Metric("decode_tokens", "decode tokens/s (median step)", d.tokens_per_sec, "tokens_per_sec",
                       where),
                Metric("decode_step", "decode step, median", d.time.median, "seconds", where),
                Metric("decode_roofline", "decode step, roofline vs measured", d.predicted.relative_error,
                       "signed_fraction", where),
                Metric("decode_bandwidth", "decode bandwidth achieved (median step)",
                       d.achieved_bytes_per_sec / 1e9, "gb_per_sec", where)]
    if r.prefill:
        p = max(r.prefill, key=lambda p: p.prompt_len)
        out.append(Metric("prefill_tokens", "prefill tokens/s (median)", p.tokens_per_sec, "tokens_per_sec",
                          f"{p.prompt_len} tokens"))
    worst = max((x.memory.relative_error for x in [*r.prefill, *r.decode]), key=abs, default=None)
    out.append(Metric("memory", "peak memory, predicted vs measured (worst point)", worst, "signed_fraction"))
    return out


def _differences(a: Any, b: Any) -> list[str]:
    """What the two runs did differently, named: the reason their figures may not compare."""
    said = []

    def differ(what: str, x: Any, y: Any) -> None:
        if x != y:
            said.append(f"{what}: A {x}, B {y}")

    differ("device", a.environment.device_name, b.environment.device_name)
    if isinstance(a, MatmulResult):
        shapes_a, shapes_b = ({_shape(p) for p in r.points} for r in (a, b))
        if shapes_a != shapes_b:
            only_a, only_b = sorted(shapes_a - shapes_b), sorted(shapes_b - shapes_a)
            said.append("shapes: " + "; ".join(
                f"only {run} has {', '.join(s)}" for run, s in (("A", only_a), ("B", only_b)) if s))
        differ("dtypes", ", ".join(sorted({p.dtype for p in a.points})),
               ", ".join(sorted({p.dtype for p in b.points})))
    elif isinstance(a, BandwidthResult):
        differ("buffer size", numbers.gb(a.size_bytes, 3), numbers.gb(b.size_bytes, 3))
    elif isinstance(a, TransferResult):
        differ("sizes (bytes)", ", ".join(f"{s:,}" for s in sorted({t.size_bytes for t in a.points})),
               ", ".join(f"{s:,}" for s in sorted({t.size_bytes for t in b.points})))
    elif isinstance(a, TrainStepResult):
        for what in ("model", "params", "batch_size", "seq_len", "optimizer", "precision"):
            differ(what.replace("_", " "), getattr(a, what), getattr(b, what))
    elif isinstance(a, GenerateResult):
        for what in ("model", "params", "dtype", "decode_steps"):
            differ(what.replace("_", " "), getattr(a, what), getattr(b, what))
        differ("prompt lengths", [p.prompt_len for p in a.prefill], [p.prompt_len for p in b.prefill])
        differ("batch x context", [(d.batch_size, d.context) for d in a.decode],
               [(d.batch_size, d.context) for d in b.decode])
    return said


def overlay(a: Any, b: Any) -> dict | None:
    """Both runs on one chart: A solid, B dashed, one colour per dtype or transfer mode."""
    series = []
    if isinstance(a, MatmulResult):
        for run, r in (("A", a), ("B", b)):
            for p in r.points:
                found = next((s for s in series if s["run"] == run and s["group"] == p.dtype), None)
                if found is None:
                    found = {"run": run, "group": p.dtype, "label": f"{run} {p.dtype}", "points": []}
                    series.append(found)
                found["points"].append({"x": p.m, "y": p.flop_per_sec / 1e12})
        return {"type": "compare_lines", "x": "m (rows of A)", "y": "TFLOP/s (median)", "series": series,
                "caption": "TFLOP/s (median) against m, per dtype: run A solid, run B dashed."}
    if isinstance(a, BandwidthResult | TransferResult):
        for run, r in (("A", a), ("B", b)):
            points = [r] if isinstance(r, BandwidthResult) else r.points
            for t in points:
                group = "copy" if isinstance(r, BandwidthResult) else _transfer_key(t)
                found = next((s for s in series if s["run"] == run and s["group"] == group), None)
                if found is None:
                    found = {"run": run, "group": group, "label": f"{run} {group}", "points": []}
                    series.append(found)
                found["points"].append({"x": t.size_bytes, "y": t.gb_per_sec})
        return {"type": "compare_lines", "x": "bytes", "y": "GB/s (median)", "series": series,
                "caption": "GB/s (median) against bytes per copy: run A solid, run B dashed."}
    if isinstance(a, TrainStepResult):
        parts = ("step", "forward", "backward", "optimizer_step")
        return {"type": "compare_bars", "labels": [p.replace("_", " ") for p in parts], "y": "ms (median)",
                "sets": {run: [getattr(r, p).median * 1e3 for p in parts] for run, r in (("A", a), ("B", b))},
                "caption": "Median milliseconds per step and per part, run A beside run B."}
    return None


def compare(a: Any, b: Any) -> dict:
    """What the compare page shows for two results (either may be None: a run without one)."""
    if a is None or b is None:
        return {"message": "Only runs that succeeded have figures to compare: "
                           + " and ".join(run for run, r in (("A", a), ("B", b)) if r is None)
                           + " has no result."}
    if a.probe != b.probe:
        return {"message": f"Run A is a {a.probe} run and run B a {b.probe} run: they measure different "
                           "things, so there is nothing to set side by side. Pick two runs of one probe."}
    ma, mb = {m.key: m for m in headline(a)}, {m.key: m for m in headline(b)}
    rows = []
    for key in [*ma, *(k for k in mb if k not in ma)]:
        x, y = ma.get(key), mb.get(key)
        shown = x or y
        va, vb = (None if m is None else m.value for m in (x, y))
        rows.append({"label": shown.label, "a": x.text if x else "—", "b": y.text if y else "—",
                     "delta": delta(va, vb, shown.kind),
                     "ratio": "n/a" if shown.kind in ("fraction", "signed_fraction") else ratio(va, vb)})
    return {"rows": rows, "differences": _differences(a, b), "chart": overlay(a, b)}
