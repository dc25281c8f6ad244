"""Tables `tally calc ... --table` prints in place of an answer's JSON, for the answers whose
JSON hides what a reader wants first: a serving engine's reserved memory, item by item, and where
a serving pass's time goes. Each face takes the API's answer (a dict) and returns rich renderables;
a command without a face has no --table option."""

from collections.abc import Callable
from typing import Any

from app.cli.tables import table

GIB = 2**30


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f}"


def engine_reserved(answer: dict) -> list[Any]:
    """What the engine holds on each GPU beside the KV cache (memory and capacity answers)."""
    engine = answer["engine"]
    rows = [[r["kind"].replace("_", " "), "in its share" if r["in_budget"] else "outside", r["rule"],
             _gib(r["bytes"])] for r in engine["reserved"]]
    rows.append(["KV cache", "the rest", f"{engine['kv_cache_tokens']:,} tokens on each replica",
                 _gib(answer["kv_budget_bytes_per_gpu"])])
    out = table(["item", "share", "rule", "GiB"], rows, text_columns=3)
    settings = ", ".join(f"{k} {v}" for k, v in engine["settings"].items())
    out.title = f"{engine['engine']} on each GPU: {engine['share_rule']} ({settings})"
    return [out, *engine["engine_notes"]]


def kernel_breakdown(answer: dict) -> list[Any]:
    """Where a prefill and a decode step spend their time, kernel by kernel, beside the roofline."""
    p, d = answer["prefill_kernels"], answer["decode_kernels"]
    keys = [("GEMMs", "gemm_seconds"), ("attention", "attention_seconds"),
            ("elementwise, sampler, cache", "other_seconds"), ("all-reduces", "communication_seconds"),
            ("kernel floors", "kernel_floor_seconds"), ("host launches", "host_seconds"),
            ("the pass", "seconds")]
    rows = [[label, f"{p[key] * 1e3:,.3f}", f"{d[key] * 1e3:,.3f}"] for label, key in keys]
    ideal = answer["prefill"]["seconds"], answer["decode"]["seconds"]
    rows.append(["roofline", f"{ideal[0] * 1e3:,.3f}", f"{ideal[1] * 1e3:,.3f}"])
    rows.append(["kernels", f"{p['kernels']:,}", f"{d['kernels']:,}"])
    batch = answer["sequences_per_replica"]
    out = table(["ms", "prefill (one prompt)", f"decode step (batch {batch})"], rows)
    out.title = (f"{answer['launch']} launch: time to first token {answer['time_to_first_token_s'] * 1e3:,.2f} ms, "
                 f"{answer['tokens_per_sec_per_user']:,.1f} tokens/s per user, "
                 f"{answer['output_tokens_per_sec']:,.0f} output tokens/s")
    return [out]


FACES: dict[str, Callable[[dict], list[Any]]] = {
    "/api/v1/inference/memory": engine_reserved,
    "/api/v1/inference/capacity": engine_reserved,
    "/api/v1/inference/time": kernel_breakdown,
}
