"""Serving simulation: a deployment under a traffic of requests, step by step as vLLM V1 schedules
them (app/accounting/serving/)."""

from collections.abc import Callable
from functools import lru_cache
from typing import Literal, NamedTuple

from pydantic import Field, ValidationInfo, field_validator

from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.inference import kernels, kv_cache, latency
from app.accounting.inference.setup import Setup
from app.accounting.serving import replicas, report, traffic
from app.accounting.serving.engine import EngineConfig
from app.accounting.serving.report import Simulation, Slo
from app.accounting.serving.steps import Drafter, StepModel
from app.accounting.transformer import TransformerConfig
from app.api.services.inference import TimedServingRequest, timing
from app.inputs.fields import Input, count, number
from app.inputs.schemas import ModelSpec, engine_model
from app.measured.here import Here
from app.probes.params import rule

TRACE_MAX_CHARS = 8_000_000


class LengthsIn(Input):
    """Tokens per request, drawn for each one."""

    distribution: traffic.Distribution = Field(
        "fixed",
        description="fixed (every request `mean`), uniform (integers on [mean(1-spread), "
        "mean(1+spread)], as vLLM's random dataset with --random-range-ratio) or lognormal "
        "(mean `mean`, `spread` the standard deviation of ln(tokens)).",
    )
    mean: number(ge=1, le=10_000_000) = Field(description="Tokens: the value, the centre or the mean.")
    spread: number(ge=0, le=4, text=False) = Field(
        0.0, description="uniform: the range ratio, below 1; lognormal: sigma."
    )
    minimum: count(1, 10_000_000) = Field(1, description="Draws below are raised to it.")
    maximum: count(1, 10_000_000) | None = Field(None, description="Draws above are cut to it; null: none.")

    @field_validator("spread")
    @classmethod
    def _ratio(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("distribution") == "uniform" and value >= 1:
            raise rule("a uniform range ratio must be below 1 (vLLM's --random-range-ratio)")
        return value

    @field_validator("maximum")
    @classmethod
    def _top(cls, value: int | None, info: ValidationInfo) -> int | None:
        low = info.data.get("minimum", 1)
        if value is not None and value < low:
            raise rule(f"{value} is below minimum ({low})")
        return value

    def lengths(self) -> traffic.Lengths:
        return traffic.Lengths(self.distribution, self.mean, self.spread, self.minimum, self.maximum)


class SloIn(Input):
    ttft_s: number(gt=0, le=1e6) | None = Field(None, description="Time to first token, seconds.")
    tpot_s: number(gt=0, le=1e6) | None = Field(
        None, description="Time per output token after the first, seconds."
    )
    e2e_s: number(gt=0, le=1e6) | None = Field(None, description="End-to-end latency, seconds.")
    percentile: number(ge=1, le=100, text=False) = Field(
        99.0,
        description="The deployment meets the SLOs when this percentile of each metric does (goodput "
        "counts each request against them).",
    )


class SpeculativeIn(Input):
    method: Literal["mtp", "draft_model"] = Field(
        "mtp",
        description="mtp: the model's multi-token-prediction layer drafts (vLLM's method mtp, the "
        "EAGLE path); draft_model: a smaller model drafts.",
    )
    num_speculative_tokens: count(1, 16) = Field(1, description="Drafts a step per decoding request (k).")
    acceptance_rate: number(ge=0, le=1, text=False) = Field(
        description="The chance each draft is accepted once the ones before it were (alpha: a step then "
        "emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average, Leviathan et al. 2023)."
    )
    draft_model: ModelSpec | None = Field(None, description="draft_model only: the drafter, in `dtype`.")


class DisaggregatedIn(Input):
    prefill_gpus: count(1, 1 << 16) = Field(
        description="GPUs of the prefill pool (num_gpus is the decode pool's)."
    )
    prefill_tensor_parallel: count(1, 1024) | None = Field(
        None, description="GPUs per prefill replica; null: the decode pool's tensor_parallel."
    )
    kv_transfer_bytes_per_sec: number(ge=1, le=1e15) | None = Field(
        None,
        description="Bandwidth of each prefill replica's link to the decode pool; null: the catalogue's "
        "interconnect (NVLink within a box). Give the NIC's across boxes.",
    )
    kv_transfer_latency_s: number(ge=0, le=10, text=False) = Field(
        0.0, description="Fixed time of each request's transfer, seconds."
    )


class SimulateRequest(TimedServingRequest):
    rate_per_s: number(gt=0, le=1e6) | None = Field(
        None, description="Requests a second on average (Poisson when burstiness is 1); give it or a trace."
    )
    requests: count(1, traffic.TRACE_MAX_ROWS) = Field(1000, description="Requests drawn at rate_per_s.")
    burstiness: number(gt=0, le=100, text=False) = Field(
        1.0,
        description="Shape of the gamma-distributed gaps (vLLM's --burstiness): 1 Poisson, below 1 burstier.",
    )
    prompt_tokens: LengthsIn = Field(
        LengthsIn(mean=traffic.VLLM_RANDOM_PROMPT_TOKENS),
        description="Prompt tokens: a number (every "
        "request), or a distribution. The default is vLLM's random dataset's 1024.",
    )
    output_tokens: LengthsIn = Field(
        LengthsIn(mean=traffic.VLLM_RANDOM_OUTPUT_TOKENS),
        description="Output tokens (generated to the end, "
        "as with --ignore-eos): a number or a distribution. The default is vLLM's random dataset's 128.",
    )
    trace: str | None = Field(
        None,
        max_length=TRACE_MAX_CHARS,
        description="Requests as CSV (header arrival_s,prompt_tokens,"
        "output_tokens) or JSON Lines of objects with those keys; replaces the drawn traffic.",
    )
    prefix_tokens: count(0, 10_000_000) = Field(
        0, description="A shared prefix (system prompt) before each drawn prompt, one of prefix_groups."
    )
    prefix_groups: count(0, 1 << 20) = Field(0, description="Distinct shared prefixes, picked uniformly.")
    prefix_hit_rate: number(ge=0, le=1, text=False) | None = Field(
        None,
        description="Instead of simulating the cache: this share of every prompt is found cached (whole "
        "blocks, held elsewhere).",
    )
    enable_prefix_caching: bool = Field(
        True, description="vLLM's --enable-prefix-caching (on by default in V1)."
    )
    enable_chunked_prefill: bool = Field(
        True, description="vLLM's --enable-chunked-prefill (on by default in V1)."
    )
    long_prefill_token_threshold: count(0, 1 << 24) = Field(
        0, description="vLLM's cap on one request's tokens a step; 0: none."
    )
    speculative: SpeculativeIn | None = None
    disaggregated: DisaggregatedIn | None = None
    slo: SloIn | None = Field(None, description="Service levels for goodput.")
    sweep_rates: list[number(gt=0, le=1e6)] | None = Field(
        None,
        max_length=16,
        description="Rates to run the same traffic at besides rate_per_s (the latency "
        "against rate chart); a run past saturation stops early and says only that.",
    )
    seed: count(0, 2**31 - 1) = Field(0, description="The same seed draws the same traffic and acceptances.")

    @field_validator("prompt_tokens", "output_tokens", mode="before")
    @classmethod
    def _fixed(cls, value: object) -> object:
        """A plain number (or quantity text) is every request's length."""
        return value if isinstance(value, dict | LengthsIn) else {"distribution": "fixed", "mean": value}

    def asked_context(self, setup: Setup) -> int:
        longest = max(_top(self.prompt_tokens), 1) + self.prefix_tokens + max(_top(self.output_tokens), 1)
        return min(longest, setup.cfg.max_seq_len)

    def asked_concurrency(self) -> int:
        return 1


def _top(lengths: LengthsIn) -> int:
    return lengths.maximum or round(lengths.mean)


def requests_of(body: SimulateRequest) -> traffic.Requests:
    if body.trace is not None:
        if "rate_per_s" in body.model_fields_set:
            raise InvalidInput("trace", "give a trace or a rate_per_s, not both")
        if body.prefix_groups:
            raise InvalidInput("prefix_groups", "a trace gives its own prompts; use prefix_hit_rate with one")
        return traffic.parse_trace(body.trace)
    if body.rate_per_s is None:
        raise InvalidInput("rate_per_s", "give a request rate (or a trace)")
    if body.prefix_groups and not body.prefix_tokens:
        raise InvalidInput("prefix_tokens", "prefix_groups needs the prefix's length")
    return traffic.generate(
        rate_per_s=body.rate_per_s,
        count=body.requests,
        prompt=body.prompt_tokens.lengths(),
        output=body.output_tokens.lengths(),
        burstiness=body.burstiness,
        prefix_tokens=body.prefix_tokens,
        prefix_groups=body.prefix_groups,
        seed=body.seed,
    )


class Layout(NamedTuple):
    """How one replica lays out a sequence's cache: what its bytes at a context depend on (hashable, so
    the tables built from it serve every candidate of a search with this replica)."""

    cfg: TransformerConfig
    cache_dtype: str
    model_dtype: str
    block_size: int | None
    mla_cache: str
    tensor_parallel: int
    engine: str

    @classmethod
    def of(cls, setup: Setup) -> "Layout":
        return cls(
            setup.cfg,
            setup.cache_dtype,
            setup.model_dtype,
            setup.block_size,
            setup.mla_cache,
            setup.tensor_parallel,
            setup.cache_engine,
        )

    def bytes(self, context: int, *, paged: bool, tp: int | None = None, state: bool = True) -> int:
        """One sequence's cache on one GPU at `context` (kv_cache.sequence_bytes_per_gpu)."""
        return kv_cache.sequence_bytes_per_gpu(
            self.cfg,
            context=context,
            cache_dtype=self.cache_dtype,
            model_dtype=self.model_dtype,
            block_size=self.block_size if paged else None,
            mla_cache=self.mla_cache,  # type: ignore[arg-type]
            tensor_parallel=tp or self.tensor_parallel,
            engine=self.engine,  # type: ignore[arg-type]
            state_included=state,
        )[0]


def _sequence_bytes(
    setup: Setup, context: int, *, paged: bool, tp: int | None = None, state: bool = True
) -> int:
    return Layout.of(setup).bytes(context, paged=paged, tp=tp, state=state)


@lru_cache(maxsize=64)
def _blocks(layout: Layout, extra_bytes_per_token: int) -> tuple[int, Callable[[int], int]]:
    """(bytes of one page, blocks one sequence holds at a context), the latter remembering each context."""
    block = layout.block_size or 1
    page = layout.bytes(min(block, layout.cfg.max_seq_len), paged=True, state=False)
    page += extra_bytes_per_token * block  # a drafter's layers take their share of every page
    known: dict[int, int] = {0: 0}

    def blocks_for(context: int) -> int:
        got = known.get(context)
        if got is None:
            held = layout.bytes(min(context, layout.cfg.max_seq_len), paged=True)
            got = known[context] = -(-(held + extra_bytes_per_token * context) // page)
        return got

    return page, blocks_for


def engine_config(body: SimulateRequest, setup: Setup, extra_bytes_per_token: int = 0) -> EngineConfig:
    """The replica's scheduler limits and its cache in blocks (what vLLM logs as the KV cache size)."""
    page, blocks_for = _blocks(Layout.of(setup), extra_bytes_per_token)
    return EngineConfig(
        max_num_seqs=setup.max_num_seqs,
        max_num_batched_tokens=setup.max_num_batched_tokens,
        block_size=setup.block_size or 1,
        num_blocks=max(0, setup.kv_budget_per_gpu) // page,
        blocks_for=blocks_for,
        chunked_prefill=body.enable_chunked_prefill,
        prefix_caching=body.enable_prefix_caching,
        prefix_hit_rate=body.prefix_hit_rate,
        long_prefill_token_threshold=body.long_prefill_token_threshold,
    )


@lru_cache(maxsize=64)
def _step_model(deployment: kernels.Deployment, on: latency.Device, layout: Layout) -> StepModel:
    """One per replica and device, so its tables serve every run on it (a sweep's rates, a search's
    counts)."""
    return StepModel(
        deployment,
        on.hw,
        on.dev,
        on.launch,
        host_seconds_per_op=on.host_seconds_per_op,
        read_bytes=lambda c: layout.bytes(c, paged=False),
    )


def step_model(body: SimulateRequest, setup: Setup, here: Here | None, profile: Profile | None) -> StepModel:
    on = timing(body, setup, here, profile, "continuous").on
    return _step_model(latency.deployment(setup), on, Layout.of(setup))


def _drafter(
    body: SimulateRequest, setup: Setup, here: Here | None, profile: Profile | None
) -> tuple[Drafter | None, int]:
    """The drafter, and the bytes a token its layers add to the cache."""
    spec = body.speculative
    if spec is None:
        return None, 0
    if spec.method == "mtp":
        if spec.draft_model is not None:
            raise InvalidInput(
                "speculative.draft_model", "is for method draft_model; mtp drafts with the model"
            )
        return (
            Drafter(spec.num_speculative_tokens, spec.acceptance_rate, "mtp"),
            setup.kv_token_bytes_per_gpu // setup.cfg.n_layers,
        )
    if spec.draft_model is None:
        raise InvalidInput("speculative.draft_model", "method draft_model needs the draft model")
    draft = body.model_copy(
        update={"model": spec.draft_model, "weight_format": body.dtype, "unquantized": None}
    )
    cfg = engine_model(spec.draft_model, field="speculative.draft_model")
    if cfg.vocab_size != setup.cfg.vocab_size:
        raise InvalidInput(
            "speculative.draft_model",
            f"its vocabulary ({cfg.vocab_size}) differs from the model's "
            f"({setup.cfg.vocab_size}); a drafter shares the tokenizer",
        )
    draft_setup = draft.setup(setup.tensor_parallel)
    model = step_model(draft, draft_setup, here, profile)
    return (
        Drafter(spec.num_speculative_tokens, spec.acceptance_rate, "draft_model", model),
        draft_setup.kv_token_bytes_per_gpu,
    )


def _pool(body: SimulateRequest, setup: Setup, here: Here | None, profile: Profile | None) -> replicas.Pool:
    drafter, extra = _drafter(body, setup, here, profile)
    return replicas.Pool(
        engine_config(body, setup, extra), step_model(body, setup, here, profile), setup.replicas, drafter
    )


def traffic_field(body: SimulateRequest) -> str:
    """The field a request's lengths came from."""
    return "trace" if body.trace is not None else "output_tokens"


def check_positions(reqs: traffic.Requests, top: int, field: str) -> int:
    """The longest request's tokens, refused when the model has fewer positions."""
    longest = max(range(len(reqs)), key=lambda i: reqs.prompt_tokens[i] + reqs.output_tokens[i])
    total = reqs.prompt_tokens[longest] + reqs.output_tokens[longest]
    if total > top:
        raise InvalidInput(
            field,
            f"a request of {reqs.prompt_tokens[longest]} prompt and "
            f"{reqs.output_tokens[longest]} output tokens exceeds the model's {top} "
            "positions (max_seq_len)",
        )
    return total


def _check(reqs: traffic.Requests, pool: replicas.Pool, setup: Setup, field: str) -> None:
    total = check_positions(reqs, setup.cfg.max_seq_len, field)
    cfg = pool.config
    if cfg.blocks_for(total) > cfg.num_blocks:
        held = cfg.num_blocks * cfg.block_size
        raise InvalidInput(
            field,
            f"a request of {total} tokens needs more than the {held:,} tokens a replica's "
            "cache holds (vLLM refuses to start so): fewer tokens, more GPUs per replica, "
            "or a smaller weight format",
        )


class Served(NamedTuple):
    """A deployment ready to serve: its (decode) pool, the prefill pool and link when disaggregated."""

    pool: replicas.Pool
    setup: Setup
    prefill: replicas.Pool | None
    prefill_setup: Setup | None
    transfer: replicas.Transfer | None
    num_gpus: int


def served(body: SimulateRequest, here: Here | None = None, profile: Profile | None = None) -> Served:
    if body.engine != "vllm":
        raise InvalidInput("engine", "the simulator follows vLLM V1's scheduler; set engine vllm")
    if body.prefix_hit_rate is not None and body.prefix_groups:
        raise InvalidInput("prefix_hit_rate", "give a hit rate or shared prefixes, not both")
    setup = body.setup()
    if (body.prefix_groups or body.prefix_hit_rate) and setup.has_state:
        raise InvalidInput(
            "prefix_groups" if body.prefix_groups else "prefix_hit_rate",
            "prefix caching on a model with state-space layers is not simulated",
        )
    pool = _pool(body, setup, here, profile)
    if body.disaggregated is None:
        return Served(pool, setup, None, None, None, setup.num_gpus)
    d = body.disaggregated
    asked = body.model_copy(
        update={
            "num_gpus": d.prefill_gpus,
            "tensor_parallel": d.prefill_tensor_parallel or setup.tensor_parallel,
        }
    )
    try:
        pre_setup = asked.setup()
    except InvalidInput as e:
        raise InvalidInput(
            f"disaggregated.{'prefill_gpus' if e.field == 'tensor_parallel' else e.field}", e.message
        ) from None
    link = d.kv_transfer_bytes_per_sec or body.accelerator().interconnect_bytes_per_sec
    if link is None:
        raise InvalidInput(
            "disaggregated.kv_transfer_bytes_per_sec",
            "the catalogue has no interconnect for this GPU: give the link's bandwidth",
        )
    per_token = _sequence_bytes(setup, 1, paged=False, tp=1, state=False)
    return Served(
        pool,
        setup,
        _pool(asked, pre_setup, here, profile),
        pre_setup,
        replicas.Transfer(per_token, link, d.kv_transfer_latency_s),
        setup.num_gpus + pre_setup.num_gpus,
    )


def run(
    body: SimulateRequest, deployment: Served, reqs: traffic.Requests, give_up_waiting: int | None = None
) -> replicas.Outcome:
    """The requests checked against the deployment (named as the request names them), then served."""
    _check(reqs, deployment.pool, deployment.setup, traffic_field(body))
    if deployment.prefill is not None:
        _check(reqs, deployment.prefill, deployment.prefill_setup, "disaggregated.prefill_gpus")
    return replicas.simulate(
        reqs,
        deployment.pool,
        seed=body.seed,
        prefill=deployment.prefill,
        transfer=deployment.transfer,
        give_up_waiting=give_up_waiting,
    )


def slo_of(body: SimulateRequest) -> Slo | None:
    s = body.slo
    return None if s is None else Slo(s.ttft_s, s.tpot_s, s.e2e_s, s.percentile)


def give_up_at(requests: int, replicas_: int) -> int:
    """Waiting requests past which a replica is saturated beyond doubt: a stable queue seldom holds a
    quarter of its traffic."""
    return max(512, requests // (4 * replicas_))


def simulate(body: SimulateRequest, here: Here | None = None, profile: Profile | None = None) -> Simulation:
    deployment = served(body, here, profile)
    if body.sweep_rates and body.trace is not None:
        raise InvalidInput("sweep_rates", "sweeps a drawn traffic's rate; a trace has its own arrivals")
    out = run(body, deployment, requests_of(body))
    slo = slo_of(body)
    answer = report.summarize(
        out,
        slo=slo,
        num_gpus=deployment.num_gpus,
        price_per_gpu_hour=body.price_per_gpu_hour,
        currency=body.currency,
    )
    limit = give_up_at(body.requests, deployment.pool.replicas)
    for rate in sorted(body.sweep_rates or ()):
        at = body.model_copy(update={"rate_per_s": rate})
        answer.by_rate.append(report.rate_point(run(at, deployment, requests_of(at), limit), rate, slo))
    return answer
