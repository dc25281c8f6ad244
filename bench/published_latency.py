"""Published serving latency and throughput against Tally's POST /api/v1/inference/time, asked in
process with each publication's settings and the API's default efficiencies (nothing fitted).
bench/published_serving.py prints this section after the memory one; run alone:

    .venv/bin/python bench/published_latency.py [--only TEXT] [--json PATH]

The cases are bench/published/serving_latency.toml (its header says what every key means). Columns:
  case       the case id
  metric     time_to_first_token_ms, tokens_per_sec_per_user or output_tokens_per_sec
  predicted  Tally's figure
  published  the publication's
  error %    (predicted - published) / published x 100
  overhead % of the predicted pass's time beyond its roofline (waves, kernel floors, launches)
The summary gives the MAPE and the count within 15% (issue 30's target: 80% of the cases), by source
and over all.
"""

import argparse
import json
import statistics
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.api import Api

CASES = Path(__file__).resolve().parent / "published" / "serving_latency.toml"
TIME = "/api/v1/inference/time"
BODY_KEYS = ("model", "gpu", "num_gpus", "tensor_parallel", "engine", "weight_format", "group_size", "dtype",
             "cache_dtype", "cuda_graphs", "launch", "batching", "memory_efficiency", "prompt_tokens", "output_tokens",
             "concurrency")
WITHIN = 15.0  # percent


@dataclass
class Row:
    case: str
    source: str
    metric: str
    predicted: float | None
    published: float
    error_pct: float | None
    overhead_pct: float | None
    note: str


def load() -> tuple[list[dict], dict]:
    data = tomllib.loads(CASES.read_text())
    return data["case"], {name: data[name] for name in ("gptj", "ft13b")}


def body(case: dict, custom: dict) -> dict:
    out = {k: case[k] for k in BODY_KEYS if k in case}
    out["model"] = custom.get(out["model"], out["model"])
    return out


def predicted(answer: dict, case: dict) -> tuple[float, float]:
    """The case's metric from the answer, and the share of its pass beyond the roofline."""
    metric = case["metric"]
    if metric == "time_to_first_token_ms":
        k = answer["prefill_kernels"]
        return 1e3 * answer["time_to_first_token_s"], 1 - answer["prefill"]["seconds"] / k["seconds"]
    k = answer["decode_kernels"]
    over = 1 - answer["decode"]["seconds"] / k["seconds"]
    if metric == "tokens_per_sec_per_user":
        return answer["tokens_per_sec_per_user"], over
    # a static batch: every sequence's output over the batched prefill and the decode steps
    per_gpu = answer["requests_per_sec"] * case["output_tokens"] / case.get("num_gpus", 1)
    return per_gpu, over


def row(api: Api, case: dict, custom: dict) -> Row:
    reply = api.post(TIME, json=body(case, custom))
    note = case.get("explains", "") or ("assumed" if case.get("assumed") else "")
    if reply.status_code != 200:
        message = f"not expressible: {reply.json().get('detail', reply.text)}"[:160]
        return Row(case["id"], case["source"], case["metric"], None, case["published"], None, None, message)
    got, over = predicted(reply.json(), case)
    err = 100 * (got - case["published"]) / case["published"]
    return Row(case["id"], case["source"], case["metric"], got, case["published"], err, 100 * over, note)


def table(only: str | None = None) -> list[Row]:
    cases, custom = load()
    api = Api()
    return [row(api, c, custom) for c in cases if not only or only in c["id"]]


def report(rows: list[Row]) -> None:
    print(f"{'case':44s} {'metric':24s} {'predicted':>11s} {'published':>11s} {'error %':>8s} {'ovh %':>6s}"
          "  note")
    for r in rows:
        got = "-" if r.predicted is None else f"{r.predicted:,.2f}"
        err = "-" if r.error_pct is None else f"{r.error_pct:+.1f}"
        over = "-" if r.overhead_pct is None else f"{r.overhead_pct:.0f}"
        print(f"{r.case:44s} {r.metric:24s} {got:>11s} {r.published:>11,.2f} {err:>8s} {over:>6s}"
              f"  {r.note[:60]}")
    print()
    sources = dict.fromkeys(r.source for r in rows)
    groups = {"all": rows} | {s: [r for r in rows if r.source == s] for s in sources}
    for name, group in groups.items():
        errs = [abs(r.error_pct) for r in group if r.error_pct is not None]
        if errs:
            within = sum(e <= WITHIN for e in errs)
            print(f"{name:17s} cases {len(group):3d}  MAPE {statistics.fmean(errs):5.1f}%  "
                  f"worst {max(errs):5.1f}%  "
                  f"within {WITHIN:g}%: {within}/{len(errs)} ({100 * within / len(errs):.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="cases whose id contains this text")
    parser.add_argument("--json", type=Path, help="write every row here as JSON")
    args = parser.parse_args()
    rows = table(args.only)
    report(rows)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
