"""How a generate job is shown: its headline figures, `tally probe`'s tables, the CSV (a row per
prefill and per decode point, its phase named), what makes two runs differ, and the launch
form's fields. Seconds shown as ms; bytes in binary units where a table says so."""

from typing import Any

from app import numbers
from app.accounting import models
from app.probes import energy
from app.probes.faces import Fieldset, Input, Metric, Row, Table, flatten, where
from app.probes.generate.result import GenerateResult
from app.probes.train_step.faces import binary_unit


def headline(r: GenerateResult) -> list[Metric]:
    """Decode at the largest batch (its longest context), prefill at the longest prompt, and the
    memory prediction's worst point."""
    out = []
    if r.decode:
        d = max(r.decode, key=lambda d: (d.batch_size, d.context))
        at = f"batch {d.batch_size}, context {d.context}"
        out += [Metric("decode_tokens", "decode tokens/s (median step)", d.tokens_per_sec, "tokens_per_sec",
                       at),
                Metric("decode_step", "decode step, median", d.time.median, "seconds", at),
                Metric("decode_roofline", "decode step, roofline vs measured", d.predicted.relative_error,
                       "signed_fraction", at),
                Metric("decode_bandwidth", "decode bandwidth achieved (median step)",
                       d.achieved_bytes_per_sec / 1e9, "gb_per_sec", at)]
    if r.graphed:
        g = max(r.graphed, key=lambda g: (g.batch_size, g.context))
        at = f"batch {g.batch_size}, context {g.context}"
        out += [Metric("decode_graph_tokens", f"decode tokens/s, graph mode ({r.graph_capture})", g.tokens_per_sec,
                       "tokens_per_sec", at),
                Metric("decode_launch_overhead", "launch overhead per step (eager - graph)",
                       g.launch_overhead_seconds, "seconds", at)]
    if r.prefill:
        p = max(r.prefill, key=lambda p: p.prompt_len)
        out.append(Metric("prefill_tokens", "prefill tokens/s (median)", p.tokens_per_sec, "tokens_per_sec",
                          f"{p.prompt_len} tokens"))
    worst = max((x.memory.relative_error for x in [*r.prefill, *r.decode]), key=abs, default=None)
    out.append(Metric("memory", "peak memory, predicted vs measured (worst point)", worst, "signed_fraction"))
    return out


def tables(r: GenerateResult) -> list:
    c, ms, sig, per = r.ceilings, numbers.ms, numbers.sig, numbers.per
    said = f"{where(r)}: {r.model} ({r.params:,} params, {r.dtype}); {r.attention}"
    ceilings = (f"roofline at this job's own ceilings: {per(c.matmul_flop_per_sec, 1e12)} TFLOP/s (a "
                f"{c.matmul_size}^3 {c.matmul_dtype} matmul), {per(c.bandwidth_bytes_per_sec, 1e9)} GB/s (a "
                f"device copy); graph mode: {r.graph_capture or 'not run'}; {r.ops_per_decode_step} ops "
                f"per decode step, {per(c.seconds_per_launch, 1e-6)} us per launch")
    points = [*r.prefill, *r.decode]
    unit, scale = binary_unit(max((max(x.memory.predicted["total"], x.memory.measured_peak_allocated)
                                   for x in points), default=1))

    def memory(m: Any) -> list[str]:
        return [per(m.measured_peak_allocated, scale), per(m.predicted["total"], scale),
                numbers.percent(m.relative_error, 1, True)]

    prefill = [[str(p.prompt_len), ms(p.time.median), ms(p.predicted.seconds),
                numbers.percent(p.predicted.relative_error, 1, True), p.predicted.bound,
                sig(p.tokens_per_sec),
                f"{p.memory.kv_cache_bytes:,}", *memory(p.memory)] for p in r.prefill]
    decode = [[str(d.batch_size), str(d.context), ms(d.time.median), ms(d.predicted.seconds),
               ms(d.predicted.launch_floor_seconds) + (" *" if d.launch_bound else ""),
               numbers.percent(d.predicted.relative_error, 1, True), d.predicted.bound, sig(d.tokens_per_sec),
               per(d.achieved_bytes_per_sec, 1e9), f"{d.memory.kv_cache_bytes:,}",
               f"{d.memory.predicted['kv_cache']:,}", *memory(d.memory)] for d in r.decode]
    peak = [f"peak measured {unit}", f"peak predicted {unit}", "peak error"]
    if energy.shown(x.time for x in points):  # J per prompt token, per generated token
        prefill = [row + energy.cells(p.time, True) for row, p in zip(prefill, r.prefill, strict=True)]
        decode = [row + energy.cells(d.time, True) for row, d in zip(decode, r.decode, strict=True)]
        peak += energy.headers("token")
    graphs = []
    if r.graphed:  # eager and graph side by side, point by point
        rows = [[str(g.batch_size), str(g.context), ms(g.eager_seconds), ms(g.time.median),
                 ms(g.launch_overhead_seconds), ms(g.predicted.seconds),
                 numbers.percent(g.predicted.seconds / g.time.median - 1, 1, True), sig(g.tokens_per_sec),
                 per(g.achieved_bytes_per_sec, 1e9)] for g in r.graphed]
        graphs = [f"decode, eager beside graph mode ({r.graph_capture}: fixed shapes, replayed, sampling on the "
                  "device)",
                  Table(["batch", "context", "eager ms", "graph ms", "launch overhead ms", "roofline ms",
                         "roofline error (graph)", "tokens/s (graph)", "GB/s achieved (graph)"], rows, 0)]
    if r.graphed_prefill:
        rows = [[str(g.prompt_len), ms(g.eager_seconds), ms(g.time.median), ms(g.overhead_seconds),
                 ms(g.predicted.seconds), numbers.percent(g.predicted.seconds / g.time.median - 1, 1, True),
                 sig(g.tokens_per_sec)] for g in r.graphed_prefill]
        graphs = [f"prefill, eager beside compiled on its own ({r.prefill_capture}, fixed shapes)",
                  Table(["prompt tokens", "eager ms", "compiled ms", "eager overhead ms", "roofline ms",
                         "roofline error (compiled)", "tokens/s (compiled)"], rows, 0), *graphs]
    return [said, ceilings,
            "prefill (one prompt, batch 1)",
            Table(["prompt tokens", "median ms", "roofline ms", "error", "bound", "tokens/s (median)",
                   "KV cache bytes", *peak], prefill, 0),
            f"decode ({r.decode_steps} steps per timed run; times per step)",
            Table(["batch", "context", "median ms", "roofline ms", "launch floor ms", "error", "bound",
                   "tokens/s (median)", "GB/s achieved (median)", "KV cache bytes", "KV predicted", *peak],
                  decode, 0),
            *graphs,
            "error = predicted / measured - 1; * launch-bound: the ops' launches alone take longer than the "
            "roofline's time", *r.notes, *(f"assumes {a}" for a in r.assumptions), *energy.note(r)]


PHASES = ("prefill", "decode", "graphed", "graphed_prefill")


def csv_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per measurement of both lists, its phase named."""
    return [{"phase": phase} | flatten(point) for phase in PHASES for point in result.get(phase, [])]


COMPARED = ("model", "params", "dtype", "decode_steps")


def differences(a: GenerateResult, b: GenerateResult) -> list[str]:
    said = []
    prompts = [[p.prompt_len for p in r.prefill] for r in (a, b)]
    if prompts[0] != prompts[1]:
        said.append(f"prompt lengths: A {prompts[0]}, B {prompts[1]}")
    grid = [[(d.batch_size, d.context) for d in r.decode] for r in (a, b)]
    if grid[0] != grid[1]:
        said.append(f"batch x context: A {grid[0]}, B {grid[1]}")
    return said


# gen_ names: every fieldset of the launch form posts, hidden or not, and the train step's
# fieldset has its own model.
FIELDS = Fieldset("generate", (
    Row("Model", (Input("gen_model", kind="select", param="model",
                        options=(("", "this device's default"), *models.presets())),)),
    Row("Batch sizes, contexts", (
        Input("gen_batch_sizes", kind="list", param="batch_sizes", placeholder="default"),
        Input("gen_contexts", "Contexts", "list", "contexts", placeholder="default"))),
    Row("Prompt lengths", (
        Input("gen_prompt_lens", kind="list", param="prompt_lens", placeholder="default"),)),
))
