"""Published serving-engine start-up logs against Tally's answers: the KV cache each engine sized
(vLLM's "GPU KV cache size: N tokens", SGLang's max_total_num_tokens), and on the way the items
the log reports (weights, the profile run's activation peak, the cache's bytes, vLLM's "Maximum
concurrency" line), each asked of POST /api/v1/inference/capacity in process with the log's
settings and nothing else.

    .venv/bin/python bench/published_serving.py [--only TEXT] [--json PATH]

The cases are bench/published/serving_memory.toml (its header says what every key means, and each
case names its log); the logs themselves are quoted in bench/published/engine_logs.md. A second
section follows: published latency and throughput against POST /api/v1/inference/time
(bench/published_latency.py, its cases bench/published/serving_latency.toml); --memory-only skips it.

Columns, one line per published figure:
  case       the case id
  figure     kv_cache_tokens, activation_gib, weights_gib, kv_gib (GiB = 2^30 bytes), max_concurrency
  predicted  Tally's figure
  published  the log's
  error %    (predicted - published) / published x 100
  note       the case's convention, where it names one; "assumed" when it carries unstated settings
The summary gives per figure the MAPE and the count within 5% (issue 30's target for the tokens:
at least 8 logs within 5%).
"""

import argparse
import json
import statistics
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

import published_latency  # bench/, beside this file

from tests.support.api import Api

CASES = Path(__file__).resolve().parent / "published" / "serving_memory.toml"
CAPACITY = "/api/v1/inference/capacity"
BODY_KEYS = ("model", "gpu", "num_gpus", "tensor_parallel", "engine", "weight_format", "dtype", "cache_dtype",
             "gpu_memory_utilization", "mem_fraction_static", "max_num_batched_tokens", "max_num_seqs",
             "free_memory_bytes", "context")
FIGURES = ("kv_cache_tokens", "activation_gib", "weights_gib", "kv_gib", "max_concurrency")
GIB = 2**30
WITHIN = 5.0  # percent


@dataclass
class Row:
    case: str
    figure: str
    predicted: float | None
    published: float
    error_pct: float | None
    note: str


def cases() -> list[dict]:
    return tomllib.loads(CASES.read_text())["case"]


def body(case: dict) -> dict:
    return {k: case[k] for k in BODY_KEYS if k in case}


def figures(answer: dict) -> dict[str, float]:
    """The answer's figures under the logs' names."""
    engine = answer["engine"]
    act = sum(r["bytes"] for r in engine["reserved"] if r["kind"] == "activations")
    # what loading took as the engine measures it: SGLang's free memory lost includes the allocator's rounding
    loaded = sum(r["bytes"] for r in engine["reserved"] if r["kind"] in ("weights", "allocator"))
    return {"kv_cache_tokens": engine["kv_cache_tokens"], "activation_gib": act / GIB, "weights_gib": loaded / GIB, "kv_gib": answer["kv_budget_bytes_per_gpu"] / GIB,
            "max_concurrency": answer["max_concurrency"]}


def rows(api: Api, case: dict) -> list[Row]:
    reply = api.post(CAPACITY, json=body(case))
    note = case.get("convention", "") or ("assumed" if case.get("assumed") else "")
    if reply.status_code != 200:
        message = f"not expressible: {reply.json().get('detail', reply.text)}"[:160]
        return [Row(case["id"], k, None, v, None, message) for k, v in case["published"].items()]
    got = figures(reply.json())
    out = []
    for kind in FIGURES:
        if kind in case["published"]:
            published = case["published"][kind]
            err = 100 * (got[kind] - published) / published
            out.append(Row(case["id"], kind, got[kind], published, err, note))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="cases whose id contains this text")
    parser.add_argument("--json", type=Path, help="write every row here as JSON")
    parser.add_argument("--memory-only", action="store_true", help="skip the latency section")
    args = parser.parse_args()
    api = Api()
    table = [row for case in cases() if not args.only or args.only in case["id"] for row in rows(api, case)]
    print(f"{'case':34s} {'figure':16s} {'predicted':>12s} {'published':>12s} {'error %':>8s}  note")
    for r in table:
        predicted = "-" if r.predicted is None else f"{r.predicted:,.2f}"
        err = "-" if r.error_pct is None else f"{r.error_pct:+.2f}"
        print(f"{r.case:34s} {r.figure:16s} {predicted:>12s} {r.published:>12,.2f} {err:>8s}  {r.note[:70]}")
    print()
    for kind in FIGURES:
        errs = [abs(r.error_pct) for r in table if r.figure == kind and r.error_pct is not None]
        if errs:
            within = sum(e <= WITHIN for e in errs)
            print(f"{kind:16s} MAPE {statistics.fmean(errs):5.2f}%  worst {max(errs):5.2f}%  "
                  f"within {WITHIN:g}%: {within}/{len(errs)}")
    latency = [] if args.memory_only else published_latency.table(args.only)
    if latency:
        print("\nlatency and throughput, POST /api/v1/inference/time at the default efficiencies\n")
        published_latency.report(latency)
    if args.json:
        args.json.write_text(json.dumps({"memory": [asdict(r) for r in table],
                                         "latency": [asdict(r) for r in latency]}, indent=1))


if __name__ == "__main__":
    main()
