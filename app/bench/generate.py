"""generate: prefill prompts and decode tokens of a real model with a KV cache on the device;
time both, measure peak memory and the cache's bytes, and set the calculators' predictions
for the same configuration beside them: the roofline at this device's ceilings (measured
here, first) and the serving memory (weights + KV cache + workspace)."""

import statistics
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from app.accounting.inference.roofline import Hardware, Pass
from app.bench import decode, energy, graphed
from app.bench.common import Setup, setup, to_json
from app.bench.livebytes import LiveBytes
from app.bench.matmul import operands
from app.bench.models import Transformer
from app.numbers import ms, sig
from app.probes.generate import plan as workload
from app.probes.generate.params import GenerateParams
from app.probes.generate.result import (
    Ceilings,
    DecodePoint,
    GenerateResult,
    GraphedDecodePoint,
    GraphedPrefillPoint,
    PrefillPoint,
    Roofline,
    ServingMemory,
)
from app.probes.results import Stats

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LAUNCHES = 1000  # tiny ops timed in a row: a flush's head start on CUDA is a few percent of them


class _Ops(TorchDispatchMode):
    """Counts the non-view aten ops run under it: on CUDA, roughly the kernels launched."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def _ops(run) -> int:
    with _Ops() as counter:
        run()
    return counter.count


def _ceilings(env: Setup, plan: workload.GeneratePlan) -> Ceilings:
    """The matmul and copy the roofline is drawn at, and the launch floor, each freed after."""
    n = plan.matmul_size
    matmul = env.timer.measure(operands(n, n, n, plan.dtype, env.device), energy=False).median
    copy = _copy_seconds(env, plan.copy_bytes)
    tiny = torch.zeros(1, device=env.device)

    def launches() -> None:
        for _ in range(LAUNCHES):
            tiny.add_(1)

    launch = env.timer.measure(launches, energy=False).median / LAUNCHES
    acc = env.catalogue()
    return Ceilings(matmul_flop_per_sec=2 * n**3 / matmul, matmul_size=n, matmul_dtype=plan.dtype,
                    bandwidth_bytes_per_sec=2 * plan.copy_bytes / copy, copy_bytes=plan.copy_bytes,
                    seconds_per_launch=launch,
                    catalogue_flop_per_sec=acc.peak_flop_per_sec.get(plan.dtype) if acc else None,
                    catalogue_bandwidth_bytes_per_sec=acc.memory_bandwidth_bytes_per_sec if acc else None)


def _copy_seconds(env: Setup, size: int) -> float:
    """Median seconds of a device-to-device copy of `size` bytes (float32), as the bandwidth probe's."""
    src = torch.randn(size // 4, device=env.device)
    dst = torch.empty_like(src)
    return env.timer.measure(lambda: dst.copy_(src), energy=False).median


def _measure(env: Setup, run, resident: list[torch.Tensor], predicted: dict[str, int],
             cache: decode.Cache) -> tuple[Stats, ServingMemory]:
    """Time `run`, and its peak memory: CUDA's allocator over the timed runs, or on a CPU one
    more run tracked op by op with `resident` (weights, cache, inputs) counted from the start."""
    if env.cuda:
        torch.cuda.synchronize(env.device)
        torch.cuda.reset_peak_memory_stats(env.device)
        stats = env.timer.measure(run)
        measured = torch.cuda.max_memory_allocated(env.device) - env.timer.flush_bytes
        reserved = torch.cuda.max_memory_reserved(env.device)
    else:
        stats = env.timer.measure(run)
        tracker = LiveBytes()
        for tensor in resident:
            tracker.track(tensor)
        with tracker:
            run()
        measured, reserved = tracker.peak, None
    return stats, ServingMemory(predicted=predicted, measured_peak_allocated=measured,
                                measured_reserved=reserved, relative_error=predicted["total"] / measured - 1,
                                kv_cache_bytes=cache.nbytes)


def _roofline(passes: list[Pass], measured: float, floor: float) -> Roofline:
    """The mean of the passes (a run's steps), against the measured median."""
    seconds = statistics.fmean(p.seconds for p in passes)
    compute = sum(p.compute_seconds for p in passes)
    return Roofline(seconds=seconds, relative_error=seconds / measured - 1,
                    bound="compute" if compute >= sum(p.memory_seconds for p in passes) else "memory",
                    flops=statistics.fmean(p.flops for p in passes),
                    bytes=statistics.fmean(p.bytes for p in passes), launch_floor_seconds=floor)


def _per_step(stats: Stats, steps: int, batch: int) -> Stats:
    """A timed run of `steps` decode steps as one step; its energy too, then per token (a step
    generates one token for each of the batch's sequences)."""
    e = stats.energy
    if e is not None:
        e = energy.per_unit(replace(e, iterations=e.iterations * steps,
                                    seconds_per_iteration=e.seconds_per_iteration / steps,
                                    joules_per_iteration=e.joules_per_iteration / steps), tokens=batch)
    return Stats(median=stats.median / steps, p20=stats.p20 / steps, p80=stats.p80 / steps,
                 mean=stats.mean / steps, best=stats.best / steps, iterations=stats.iterations, energy=e)


def run(raw: dict, progress) -> dict:
    p, env = setup(GenerateParams, raw)
    plan = workload.generate(p, env.cuda)
    cfg, dtype, device = plan.config, TORCH_DTYPES[plan.dtype], env.device
    total = 1 + len(plan.prompt_lens) + len(plan.batch_sizes) * len(plan.contexts)
    progress(0, total, "measuring this device's matmul, copy and launch")
    ceilings = _ceilings(env, plan)
    hw = Hardware(peak_flop_per_sec=ceilings.matmul_flop_per_sec,
                  bandwidth_bytes_per_sec=ceilings.bandwidth_bytes_per_sec, flops_efficiency=1.0,
                  memory_efficiency=1.0, interconnect_bytes_per_sec=None, allreduce_latency_s=0.0)
    with torch.device(device):
        model = Transformer(cfg).to(dtype).eval()
    weights = list(model.parameters())
    assert sum(t.nbytes for t in weights) == plan.weights_bytes
    done, prefills, compiled, prefill_capture = 1, [], [], None
    for n in plan.prompt_lens:
        progress(done, total, f"prefill of {n} tokens")
        prefills.append(_prefill_point(env, model, plan, hw, ceilings, weights, n))
        if "graph" in plan.modes:
            point, prefill_capture = _compiled_prefill_point(env, model, plan, prefills[-1], n)
            compiled.append(point)
        done += 1
    decodes, graphs, capture = [], [], None
    for b in plan.batch_sizes:
        for c in plan.contexts:
            progress(done, total, f"decode: batch {b}, context {c}")
            decodes.append(_decode_point(env, model, plan, hw, ceilings, weights, b, c))
            if "graph" in plan.modes:
                point, capture = _graphed_point(env, model, plan, decodes[-1], b, c)
                graphs.append(point)
            done += 1
    progress(done, total, "done")
    return to_json(GenerateResult(
        probe="generate", environment=env.environment(p.seed), model=plan.name, params=plan.params,
        dtype=plan.dtype, weights_bytes=sum(t.nbytes for t in weights), attention=_attention(plan),
        decode_steps=plan.decode_steps, ops_per_decode_step=decodes[0].ops_per_step,
        cuda_graphs=capture == "cuda_graph", ceilings=ceilings, prefill=prefills, decode=decodes,
        notes=_notes(env, ceilings, decodes, graphs, capture) + _prefill_notes(compiled, prefill_capture),
        assumptions=_assumptions(plan, ceilings),
        graphed=graphs, graph_capture=capture, graphed_prefill=compiled, prefill_capture=prefill_capture))


def _prefill_point(env: Setup, model: Transformer, plan: workload.GeneratePlan, hw: Hardware,
                   ceilings: Ceilings, weights: list[torch.Tensor], n: int) -> PrefillPoint:
    """One prompt of n tokens into a cache of its length, timed again and again (each run
    rewrites the same slots)."""
    cfg, device = plan.config, env.device
    cache = decode.allocate(cfg, batch=1, context=n, dtype=TORCH_DTYPES[plan.dtype], device=device)
    prompt = torch.randint(cfg.vocab_size, (1, n), device=device)

    def fill() -> torch.Tensor:
        return decode.prefill(model, prompt, cache)

    predicted = workload.prefill_memory(plan, n)
    stats, memory = _measure(env, fill, [*weights, *cache.tensors(), prompt], predicted,
                             cache)
    energy.per_unit(stats.energy, tokens=n)  # one timed run prefills the n prompt tokens
    roof = workload.prefill_pass(plan, hw, n)
    return PrefillPoint(prompt_len=n, time=stats, tokens_per_sec=n / stats.median,
                        achieved_flop_per_sec=roof.flops / stats.median,
                        predicted=_roofline([roof], stats.median, _ops(fill) * ceilings.seconds_per_launch),
                        memory=memory)


def _compiled_prefill_point(env: Setup, model: Transformer, plan: workload.GeneratePlan, eager: PrefillPoint,
                            n: int) -> tuple[GraphedPrefillPoint, str]:
    """The eager prefill's prompt through the forward compiled on its own (built by the first call,
    outside the timing), timed again and again into the same slots."""
    cfg, device = plan.config, env.device
    cache = decode.allocate(cfg, batch=1, context=n, dtype=TORCH_DTYPES[plan.dtype], device=device)
    prompt = torch.randint(cfg.vocab_size, (1, n), device=device)
    run, how = graphed.compiled_prefill(env.cuda)
    with torch.no_grad():
        run(model, prompt, cache)  # builds it

    def fill() -> torch.Tensor:
        with torch.no_grad():
            return run(model, prompt, cache)

    stats = env.timer.measure(fill)
    return GraphedPrefillPoint(prompt_len=n, time=stats, tokens_per_sec=n / stats.median,
                               eager_seconds=eager.time.median,
                               overhead_seconds=eager.time.median - stats.median, predicted=eager.predicted), how


def _decode_point(env: Setup, model: Transformer, plan: workload.GeneratePlan, hw: Hardware,
                  ceilings: Ceilings, weights: list[torch.Tensor], batch: int, context: int) -> DecodePoint:
    """Each sequence's prompt (context - decode_steps tokens) prefilled alone into its row, then
    timed runs of decode_steps steps ending at `context`, each rewriting the same slots."""
    steps = plan.decode_steps
    cache, ids, start = _filled(env, model, plan, batch, context)

    def generate() -> torch.Tensor:
        return decode.decode(model, ids, cache, start, steps)

    stats, memory = _measure(env, generate, [*weights, *cache.tensors(), ids],
                             workload.decode_memory(plan, batch, context), cache)
    ops = _ops(lambda: decode.decode(model, ids, cache, context - 1, 1))
    per = _per_step(stats, steps, batch)
    passes = [workload.decode_pass(plan, hw, batch, c) for c in range(start + 1, context + 1)]
    predicted = _roofline(passes, per.median, ops * ceilings.seconds_per_launch)
    return DecodePoint(
        batch_size=batch, context=context, time=per, tokens_per_sec=batch / per.median,
        achieved_bytes_per_sec=predicted.bytes / per.median, predicted=predicted,
        predicted_tokens_per_sec=batch / predicted.seconds,
        ops_per_step=ops, launch_bound=predicted.launch_floor_seconds > predicted.seconds, memory=memory)


def _filled(env: Setup, model: Transformer, plan: workload.GeneratePlan, batch: int,
            context: int) -> tuple[decode.Cache, torch.Tensor, int]:
    """A cache for `batch` sequences of `context` tokens, each row's prompt (context -
    decode_steps tokens) prefilled alone; the tokens to feed next (B, 1), and their position."""
    cfg, device = plan.config, env.device
    start = context - plan.decode_steps
    cache = decode.allocate(cfg, batch=batch, context=context, dtype=TORCH_DTYPES[plan.dtype], device=device)
    for i in range(batch):
        decode.prefill(model, torch.randint(cfg.vocab_size, (1, start), device=device), cache.row(i))
    return cache, torch.randint(cfg.vocab_size, (batch, 1), device=device), start


def _graphed_point(env: Setup, model: Transformer, plan: workload.GeneratePlan, eager: DecodePoint,
                   batch: int, context: int) -> tuple[GraphedDecodePoint, str]:
    """The eager point's workload as a fixed-shape step, prepared once (captured or compiled),
    then timed runs of decode_steps replays ending at `context`."""
    steps = plan.decode_steps
    cache, ids, start = _filled(env, model, plan, batch, context)
    static = graphed.StaticDecode(model, cache, batch)
    static.start(ids, start)
    step, capture = graphed.prepare(static, env.cuda)

    def generate() -> torch.Tensor:
        return graphed.decode(step, static, ids, start, steps)

    per = _per_step(env.timer.measure(generate), steps, batch)
    return GraphedDecodePoint(
        batch_size=batch, context=context, time=per, tokens_per_sec=batch / per.median,
        achieved_bytes_per_sec=eager.predicted.bytes / per.median, eager_seconds=eager.time.median,
        launch_overhead_seconds=eager.time.median - per.median, predicted=eager.predicted), capture


def _attention(plan: workload.GeneratePlan) -> str:
    cfg = plan.config
    if cfg.mla:
        said = (f"latent: {cfg.kv_lora_rank} + {cfg.qk_rope_head_dim} values per token per layer cached; "
                "decoded absorbed (W_UK into the query, W_UV into the output), prefilled decompressed")
    else:
        kind = ("multi-query" if cfg.kv_heads == 1 else "multi-head" if cfg.kv_heads == cfg.n_heads
                else "grouped-query")
        said = (f"{kind}: K and V of {cfg.kv_heads} heads x {cfg.hd} per layer cached; each decode query "
                "group read in place through SDPA")
    windowed = cfg.layers.n_windowed
    if windowed:
        said += (f"; {windowed} of {cfg.n_layers} layers keep a ring of min(context, {cfg.sliding_window}) "
                 "tokens")
    return said


def _notes(env: Setup, ceilings: Ceilings, points: list[DecodePoint], graphs: list[GraphedDecodePoint],
           capture: str | None) -> list[str]:
    launch_us = ceilings.seconds_per_launch * 1e6
    notes = [f"eager mode: each op of a step is launched from Python, {sig(launch_us)} us apiece here, so a "
             "small model's step at batch 1 is launch-bound, not bandwidth-bound"]
    if graphs:
        saved = statistics.median(g.launch_overhead_seconds / g.eager_seconds for g in graphs)
        notes.append(f"graph mode ({capture}): the same steps with fixed shapes, replayed; launching from "
                     f"Python cost the eager steps a median {sig(100 * saved)}% of their time")
    for d in points:
        if d.launch_bound:
            notes.append(f"batch {d.batch_size}, context {d.context}: launching its ops alone takes "
                         f"{ms(d.predicted.launch_floor_seconds)} ms, more than the roofline's "
                         f"{ms(d.predicted.seconds)} ms (measured {ms(d.time.median)} ms): "
                         "launch-bound")
    if not env.cuda:
        notes.append("on a CPU the times are this host's, reported beside the roofline at its measured "
                     "ceilings, not held to it; the peak memory is the prediction the tests hold to 10%")
    return notes


def _prefill_notes(compiled: list[GraphedPrefillPoint], how: str | None) -> list[str]:
    if not compiled:
        return []
    saved = statistics.median(p.overhead_seconds / p.eager_seconds for p in compiled)
    return [f"graph mode's prefill ({how}): the forward compiled on its own with fixed shapes, as gpt-fast's "
            f"--compile_prefill runs it; eager cost the prompts a median {sig(100 * saved)}% of their time"]


def _assumptions(plan: workload.GeneratePlan, ceilings: Ceilings) -> list[str]:
    said = [
        f"times: the roofline at this job's measured ceilings (a {ceilings.matmul_size}^3 matmul in "
        f"{plan.dtype}, a copy of {ceilings.copy_bytes:,} bytes), efficiencies 1; the catalogue's figures "
        "are shown beside them, not used",
        "decode bytes per step: the weights read once (the whole embedding table counted, as the serving "
        "calculators count it), every sequence's cache read and its new entries written",
        "decode FLOPs: roofline.decode_flops per sequence; prefill FLOPs: roofline.prefill_flops, one "
        "prompt, the causal triangle, the LM head on the last token",
        "memory: weights (parameters x dtype bytes) + the unpaged KV cache (kv_cache.py) + the serving "
        "workspace of the forward (workspace.py) + what eager PyTorch holds beyond it (the layer's input and "
        "the sublayer's output at residual width, RoPE tables; absorbed latent decode's fp32 scores)",
        "greedy sampling over fp32 softmax probabilities on the device; no paged cache; graph mode reads each "
        "layer's whole cache under a mask, as gpt-fast does (app/bench/graphed.py)",
    ]
    if plan.config.moe:
        said.append("routed experts read per step: roofline.experts_read(batch) of each MoE layer's")
    if plan.config.mla:
        said.append("absorbed decode reads the latent cache twice (scores, then values); FlashMLA reads it "
                    "once, as the roofline counts")
    return said
