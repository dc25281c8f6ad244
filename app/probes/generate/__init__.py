"""The generate probe: prefill and decode with a KV cache, times, tokens/s, decode bandwidth, peak
memory and cache bytes, each beside the roofline's and the serving calculators' prediction.
params.py: what it takes; plan.py: the calculators' view; result.py: what it reports;
faces.py: how it is shown. Its torch side is app/bench/generate.py."""

from typing import Any

from app.probes.base import Kind, Least, Need, Probe, timer_least
from app.probes.faces import Faces
from app.probes.generate import faces
from app.probes.generate.params import GenerateParams
from app.probes.generate.plan import generate, generate_need
from app.probes.generate.result import GenerateResult
from app.probes.ledger import Ledger, Pair, positive


def need(params: GenerateParams, kind: Kind) -> Need:
    return generate_need(params, kind == "cuda")


def least_seconds(params: GenerateParams, kind: Kind) -> Least:
    # The ceilings (a matmul, a copy, the launch floor), each prompt, each batch size at each context.
    plan = generate(params, kind == "cuda")
    return timer_least(params, 3 + len(plan.prompt_lens) + len(plan.batch_sizes) * len(plan.contexts))


def _datasheet_pairs(params: Any, result: GenerateResult) -> list[Pair]:
    """Each decode step's peak bytes beside the serving calculators' (weights, cache, workspace)."""
    return positive([Pair("decode_peak_bytes", "memory", p.memory.predicted.get("total", 0),
                          p.memory.measured_peak_allocated, f"batch {p.batch_size}, context {p.context}")
                     for p in result.decode])


PROBE = Probe(
    "generate", "prefill and decode with a KV cache: times, tokens/s, decode bandwidth, peak memory and "
    "cache bytes, each beside the roofline's and the serving calculators' prediction", GenerateParams,
    GenerateResult, "app.bench.generate:run", need, least_seconds,
    faces=Faces(headline=faces.headline, tables=faces.tables, page="probes/generate.html",
                form=(faces.FIELDS,), csv_rows=faces.csv_rows, compared=faces.COMPARED,
                differences=faces.differences),
    ledger=Ledger(_datasheet_pairs))
