"""The serve probe: a mini serving engine on the device, measured against the serving simulator.

The probe's transformer serves a Poisson traffic with continuous batching, scheduled by the
simulator's own scheduler (app/accounting/serving/engine.py, vLLM V1's rules), each step run for real:
every scheduled token in one flattened forward, each request's attention over its slot of a
preallocated cache, greedy sampling. Time is virtual: a step lasts what its forward measured, and an
idle engine jumps to the next arrival, so a minute of traffic costs only the seconds its steps take.
Before serving, the child times a spread of step compositions and fits the step's cost (seconds a
step, a token, a sequence, a cached token read, an attention pair), as Vidur profiles a device; the
simulator then serves the same requests with that fitted step and its TTFT and TPOT percentiles are
set beside the measured ones. Its torch side is app/bench/serve.py."""

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from app import numbers
from app.accounting import dtypes, models
from app.accounting.errors import InvalidInput
from app.accounting.inference import kv_cache, workspace
from app.accounting.records import RECORD
from app.accounting.serving import traffic
from app.accounting.serving.metrics import percentile
from app.inputs.fields import count, number
from app.probes.base import Kind, Least, Need, Probe, timer_least
from app.probes.faces import Faces, Metric, Table, where
from app.probes.generate.params import GENERATE_SIZES, GenerateDtype, GenerateModel
from app.probes.generate.plan import DECODE_UNBUILT, served_model
from app.probes.params import ProbeParams
from app.probes.results import Environment


class ServeParams(ProbeParams):
    model: GenerateModel | None = Field(  # type: ignore[valid-type]
        None,
        description="A preset name or an inline TransformerConfig (full attention, no latent attention). "
        "Default: llama3.2-1b on CUDA; on CPU the generate probe's small llama-like model.",
    )
    dtype: GenerateDtype | None = Field(None, description="Default bfloat16 on CUDA, float32 on CPU.")
    rate_per_s: number(gt=0, le=1e5) | None = Field(
        None, description="Poisson arrivals a second. Default 8 on CUDA, 20 on CPU."
    )
    requests: count(1, 20_000) | None = Field(
        None, description="Requests served. Default 400 on CUDA, 150 on CPU."
    )
    prompt_tokens: count(1, 65_536) | None = Field(
        None,
        description="Mean prompt length, drawn uniformly within range_ratio of it (vLLM's random "
        "dataset). Default 512 on CUDA, 48 on CPU.",
    )
    output_tokens: count(1, 65_536) | None = Field(
        None, description="Mean output length, drawn the same way. Default 128 on CUDA, 24 on CPU."
    )
    range_ratio: number(ge=0, le=0.99, text=False) = Field(0.5, description="vLLM's --random-range-ratio.")
    max_num_seqs: count(1, 1024) | None = Field(None, description="Running requests at most. Default 64, 16.")
    graphs: bool | None = Field(
        None, description="Replay decode-only steps from CUDA graphs, one per batch size (padded up, as "
        "vLLM captures its decode batches); steps with prompt tokens stay eager. Default: on CUDA yes, on a "
        "CPU no (there the same fixed-shape step runs eagerly).")
    max_num_batched_tokens: count(1, 65_536) | None = Field(
        None, description="Tokens a step at most (chunked prefill). Default 2048 on CUDA, 128 on CPU."
    )


@dataclass(frozen=True)
class ServeSizes:
    """A device kind's default traffic and engine limits."""

    rate_per_s: float
    requests: int
    prompt_tokens: int
    output_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int


# A real 1B model's traffic on CUDA; on a CPU, the small model at a load it serves in seconds.
SIZES = {"cuda": ServeSizes(8.0, 400, 512, 128, 64, 2048), "cpu": ServeSizes(20.0, 150, 48, 24, 16, 128)}
BLOCK_TOKENS = 16
SERVE_UNBUILT = DECODE_UNBUILT | {
    "mla": (False, "latent attention in its varlen attention"),
    "sliding_window": (None, "sliding windows in its varlen attention"),
}


@dataclass(frozen=True)
class ServePlan:
    name: str
    config: models.TransformerConfig
    dtype: str
    dtype_bytes: int
    params: int
    rate_per_s: float
    requests: traffic.Requests
    max_num_seqs: int
    max_num_batched_tokens: int
    longest: int
    """Tokens of the longest request: each of max_num_seqs cache slots holds this many."""

    @property
    def num_blocks(self) -> int:
        """The cache in blocks: every slot whole, so no request is ever preempted."""
        return self.max_num_seqs * -(-self.longest // BLOCK_TOKENS)


def plan(p: ServeParams, cuda: bool) -> ServePlan:
    sizes = GENERATE_SIZES["cuda" if cuda else "cpu"]
    defaults = SIZES["cuda" if cuda else "cpu"]
    chosen = {f: getattr(defaults, f) if getattr(p, f) is None else getattr(p, f)
              for f in ServeSizes.__dataclass_fields__}
    name, cfg = served_model(p.model, cuda, "serve", SERVE_UNBUILT)
    dtype = p.dtype or sizes.dtype
    reqs = traffic.generate(
        rate_per_s=chosen["rate_per_s"],
        count=chosen["requests"],
        prompt=traffic.Lengths("uniform", chosen["prompt_tokens"], p.range_ratio),
        output=traffic.Lengths("uniform", chosen["output_tokens"], p.range_ratio),
        seed=p.seed,
    )
    longest = max(a + b for a, b in zip(reqs.prompt_tokens, reqs.output_tokens, strict=True))
    if longest > cfg.max_seq_len:
        raise InvalidInput(
            "params.output_tokens",
            f"a request of {longest} tokens exceeds the model's {cfg.max_seq_len} positions (max_seq_len)",
        )
    return ServePlan(
        name,
        cfg,
        dtype,
        int(dtypes.lookup(dtype).storage_bytes),
        models.count_params(cfg).total,
        chosen["rate_per_s"],
        reqs,
        chosen["max_num_seqs"],
        chosen["max_num_batched_tokens"],
        longest,
    )


def need(p: ServeParams, kind: Kind) -> Need:
    """Weights, every slot's cache, and the largest step's workspace."""
    sp = plan(p, kind == "cuda")
    cache = kv_cache.kv_cache(
        sp.config, context=sp.longest, batch=sp.max_num_seqs, model_dtype=sp.dtype, block_size=None
    ).total_bytes
    ws = workspace.workspace(
        sp.config, tokens=sp.max_num_batched_tokens, sequences=sp.max_num_seqs, act_bytes=sp.dtype_bytes
    ).bytes
    return sp.params * sp.dtype_bytes + cache + ws, "params.max_num_seqs"


def least_seconds(p: ServeParams, kind: Kind) -> Least:
    return timer_least(p, 1)


@dataclass(slots=True)
class ServeLatency:
    """Seconds, over the requests; throughput over the run's virtual span."""

    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    tpot_p50: float
    tpot_p90: float
    tpot_p99: float
    e2e_p50: float
    e2e_p99: float
    requests_per_sec: float
    steps: int

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class StepFit:
    """A step's seconds as the child measured them, least squares over the compositions it timed:
    per_step + per_token x tokens + per_sequence x sequences + per_read_token x cached tokens read
    + per_pair x attention pairs (a chunk's queries times the keys before them)."""

    per_step_s: float
    per_token_s: float
    per_sequence_s: float
    per_read_token_s: float
    per_pair_s: float
    points: int
    rms_relative_error: float
    per_decode_only_s: float = 0.0
    """With graphs: what a step of decodes alone adds (negative: saves) beyond the rest, replayed."""
    """Of the fit over the timed compositions."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class ServeResult:
    probe: Literal["serve"]
    environment: Environment
    model: str
    params: int
    dtype: str
    requests: int
    rate_per_s: float
    max_num_seqs: int
    max_num_batched_tokens: int
    measured: ServeLatency
    """The mini-engine: each step run on the device and timed."""
    simulated: ServeLatency
    """The serving simulator on the same requests, each step's time from `fit`."""
    fit: StepFit
    ttft_p50_ratio: float
    """simulated / measured."""
    tpot_p50_ratio: float
    notes: list[str]
    graphs: bool = False
    """Decode-only steps replayed from CUDA graphs (or their fixed-shape step run eagerly off CUDA)."""
    catalogue: ServeLatency | None = None
    """On a catalogue GPU: the simulator with Tally's own step model for it, uncalibrated (the
    serving calculators' defaults, eager launches as this engine's); null elsewhere."""
    catalogue_ttft_p50_ratio: float | None = None
    """catalogue / measured."""
    catalogue_tpot_p50_ratio: float | None = None

    __pydantic_config__ = RECORD


def latency(
    first: list[float], finish: list[float], arrival: list[float], output: list[int], steps: int
) -> ServeLatency:
    ttft = sorted(f - a for f, a in zip(first, arrival, strict=True))
    e2e = [f - a for f, a in zip(finish, arrival, strict=True)]
    tpot = sorted(
        (e - t) / (o - 1)
        for e, t, o in zip(e2e, (f - a for f, a in zip(first, arrival, strict=True)), output, strict=True)
        if o > 1
    )
    e2e.sort()
    span = max(finish) - min(arrival)
    return ServeLatency(
        *(percentile(ttft, q) for q in (50, 90, 99)),
        *(percentile(tpot, q) for q in (50, 90, 99)),
        percentile(e2e, 50),
        percentile(e2e, 99),
        len(arrival) / span if span > 0 else math.inf,
        steps,
    )


def headline(r: ServeResult) -> list[Metric]:
    m, s = r.measured, r.simulated
    return [
        Metric("ttft_p50", "time to first token, p50 (measured)", m.ttft_p50, "seconds"),
        Metric("ttft_p50_simulated", "simulated", s.ttft_p50, "seconds"),
        Metric("tpot_p50", "time per output token, p50 (measured)", m.tpot_p50, "seconds"),
        Metric("tpot_p50_simulated", "simulated", s.tpot_p50, "seconds"),
        Metric("ttft_ratio", "simulated / measured TTFT p50", r.ttft_p50_ratio, "ratio"),
        Metric("tpot_ratio", "simulated / measured TPOT p50", r.tpot_p50_ratio, "ratio"),
        *([] if r.catalogue is None else [
            Metric("ttft_ratio_catalogue", "catalogue model / measured TTFT p50", r.catalogue_ttft_p50_ratio,
                   "ratio"),
            Metric("tpot_ratio_catalogue", "catalogue model / measured TPOT p50", r.catalogue_tpot_p50_ratio,
                   "ratio")]),
    ]


def tables(r: ServeResult) -> list:
    rows = []
    for label, key in (("TTFT p50", "ttft_p50"), ("TTFT p90", "ttft_p90"), ("TTFT p99", "ttft_p99"),
                       ("TPOT p50", "tpot_p50"), ("TPOT p90", "tpot_p90"), ("TPOT p99", "tpot_p99"),
                       ("E2E p50", "e2e_p50"), ("E2E p99", "e2e_p99")):
        m, s = getattr(r.measured, key), getattr(r.simulated, key)
        row = [label, numbers.ms(m), numbers.ms(s), numbers.percent(s / m - 1, signed=True) if m else "n/a"]
        if r.catalogue is not None:
            c = getattr(r.catalogue, key)
            row += [numbers.ms(c), numbers.percent(c / m - 1, signed=True) if m else "n/a"]
        rows.append(row)
    headers = ["", "measured", "simulated (fitted step)", "simulated vs measured"]
    if r.catalogue is not None:
        headers += ["simulated (catalogue)", "catalogue vs measured"]
    f = r.fit
    fit = Table(["per step", "per token", "per sequence", "per cached token read", "per attention pair",
                 "compositions", "fit error (rms)"],
                [[f"{f.per_step_s * 1e6:.4g} us", f"{f.per_token_s * 1e6:.4g} us",
                  f"{f.per_sequence_s * 1e6:.4g} us", f"{f.per_read_token_s * 1e9:.4g} ns",
                  f"{f.per_pair_s * 1e9:.4g} ns", str(f.points), numbers.percent(f.rms_relative_error)]],
                0, "The step's cost as the child fitted it")
    title = f"{r.requests} requests at {numbers.sig(r.rate_per_s)}/s, milliseconds"
    return [where(r), Table(headers, rows, 1, title), fit]


PROBE = Probe(
    "serve",
    "a mini serving engine (continuous batching, chunked prefill) under Poisson load: TTFT and TPOT "
    "percentiles measured beside the serving simulator's on the same requests",
    ServeParams,
    ServeResult,
    "app.bench.serve:run",
    need,
    least_seconds,
    faces=Faces(headline=headline, tables=tables),
)
