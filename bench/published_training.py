"""Published runs against Tally's answers: pretraining throughput, step time, MFU, memory and
GPU-hours from papers and framework benchmark pages, and fine-tuning memory from Unsloth's and
torchtune's tables, each asked of the API in process with the published setup and nothing else.

    .venv/bin/python bench/published_training.py [--only TEXT] [--loose] [--json PATH]
                                                  [--matmul-time flat|shaped]

The cases are bench/published/training.toml and finetune.toml; their headers say what every key
means and each case names its source. A pretraining case is one POST /api/v1/plan/training: its
model, GPU, GPU count, batch, sequence length and precision, and its published layout pinned in
`limits` as single-value lists (what the source does not publish, the search chooses); every
other input (compute_efficiency, links, overlap) stays at the API's default, never set per case.
A fine-tuning case is POST /api/v1/finetune; a longest context is bisected on its `fits`.
Published settings go in as published, whether or not the API has a field for them yet (context
parallelism, uneven first and last pipeline stages, an fp8 recipe, op-level selective recompute,
activation offload, the fine-tuning stack, torch.compile ...): a 422 then names each one.

Columns of the table, one line per published figure:
  case       the case id in the TOML
  figure     tokens_per_sec_per_gpu, tokens_per_sec, step_seconds, mfu, hfu, tflops_per_gpu
             (the FLOPs the source counts: model, or hardware with recompute), peak_memory_gib
             (2^30 bytes), peak_memory_gb (10^9 bytes), gpu_hours, longest_context (tokens)
  predicted  Tally's figure for the fastest layout that fits (mfu and hfu in %)
  published  the source's figure
  error %    (predicted - published) / published x 100
  note       "not expressible (fields): message" for a 422, or a layout every candidate of which
             the search refuses; "no fit" when the layout is judged not to fit (its figures then
             come from the layout closest to fitting); the case's `convention`, the mechanism
             believed to explain a gap; "assumed" when the request carries unpublished values
The summary gives per figure kind the mean absolute percentage error (MAPE) and the share within
10% over the expressible cases that fit, and counts the cases by outcome.

--loose also answers each case refused only for fields the API lacks, with those fields taken
back to what it has (fp8 as bf16_mixed, op_selective as selective, ZeRO 2/3 with pipelining as
ZeRO 1, the rest dropped): rows marked "~", summarised apart, never mixed into the strict MAPE.
--json PATH writes every row (with the request sent and the layout answered) as JSON.
"""

import argparse
import copy
import json
import statistics
import tempfile
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fastapi.testclient import TestClient

from app.api.build import build_api
from app.api.compute import Compute
from app.config import Settings
from app.jobs.store import Store

CASES = Path(__file__).resolve().parent / "published"
PLAN, FINETUNE = "/api/v1/plan/training", "/api/v1/finetune"
# Layout keys sent in `limits` as a one-value list: the degrees the search may take.
LIMIT_KEYS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel", "zero_stage",
              "micro_batch", "virtual_stages", "recompute")
STAGE_KEYS = ("first_stage_layers", "last_stage_layers")  # in `limits` as one number each
PLAN_KEYS = ("model", "gpu", "gpu_overrides", "num_gpus", "global_batch_sequences", "global_batch_tokens",
             "seq_len", "precision", "optimizer", "inter_node_bytes_per_sec", "training_tokens",
             "context_parallel_algorithm", "fp8_param_gather")
FINETUNE_KEYS = ("model", "mode", "lora_rank", "lora_targets", "base_format", "precision", "optimizer",
                 "paged_optimizer", "batch_size", "seq_len", "recompute", "data_parallel", "zero_stage",
                 "gpu", "gpu_overrides", "stack", "activation_offload")
# Fields announced for the API (refused until it has them): --loose drops them, and a case's `extra`.
PENDING = {"limits.context_parallel", "limits.first_stage_layers", "limits.last_stage_layers",
           "activation_offload", "stack", "context_parallel_algorithm", "fp8_param_gather"}
TRAINING_KINDS = ("tokens_per_sec_per_gpu", "tokens_per_sec", "step_seconds", "mfu", "hfu", "tflops_per_gpu",
                  "peak_memory_gib", "peak_memory_gb", "gpu_hours")
FINETUNE_KINDS = ("peak_memory_gib", "peak_memory_gb", "longest_context")
MAX_SEQ = 10_000_000  # the API's bound on seq_len (app/api/services/finetune.py)


@dataclass
class Row:
    case: str
    source: str
    kind: str
    published: float
    predicted: float | None = None
    status: str = "ok"
    """ok, no fit (the closest layout's figures), or not expressible."""
    loose: bool = False
    note: str = ""
    refused_fields: list[str] = field(default_factory=list)
    refused_by: str = ""
    """api (a 422 naming refused_fields) or search (every candidate refused, for those reasons)."""
    request: dict = field(default_factory=dict)
    layout: dict | None = None
    shaped_error_pct: float | None = None
    """A plan's figure with matmul_time shaped beside the default's: what timing each GEMM from its
    shape would make of the same case (--beside shaped)."""

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or self.status != "ok":
            return None
        return (self.predicted - self.published) / self.published * 100


def load(name: str) -> list[dict]:
    with open(CASES / f"{name}.toml", "rb") as f:
        return tomllib.load(f)["case"]


def client() -> TestClient:
    """The JSON API alone, in process, over a throw-away job database; calculations inline."""
    settings = Settings(database_path=Path(tempfile.mkdtemp(prefix="tally-published-")) / "bench.db")
    app = build_api(settings, Store(settings.database()),
                    routes=("app.api.routes.plan", "app.api.routes.finetune", "app.api.routes.hardware"),
                    compute=Compute.of(settings, inline=True))
    return TestClient(app, base_url="http://localhost")


# --- requests ---------------------------------------------------------------------------------------

UNMODELLED = {
    "torch_compile": "torch.compile fuses elementwise kernels, whose time Tally's plan does not count, and its "
                     "partitioner recomputes pointwise outputs that eager saves, whose bytes Tally counts as "
                     "eager's: no field would change its answer",
}
"""Published settings the plan has no mechanism for, named on the case's rows instead of sent."""


def unmodelled(case: dict) -> str:
    named = [k for k in case.get("extra", {}) if k in UNMODELLED]
    return "; ".join(f"unmodelled {k}: {UNMODELLED[k]}" for k in named)


SENT_WITH_EVERY_PLAN: dict = {}
"""A model choice the command line makes for every case alike (--matmul-time), never per case."""


def training_body(case: dict) -> dict:
    """The published setup as a plan request; data_parallel is what the other degrees leave."""
    body = {k: case[k] for k in PLAN_KEYS if k in case} | {"top_k": 1} | SENT_WITH_EVERY_PLAN
    layout = case.get("layout", {})
    limits: dict = {k: [layout[k]] for k in LIMIT_KEYS if k in layout}
    limits |= {k: layout[k] for k in STAGE_KEYS if k in layout}
    if "sequence_parallel" in layout:
        limits["sequence_parallel"] = layout["sequence_parallel"]
    if limits:
        body["limits"] = limits
    if layout.get("activation_offload"):
        body["activation_offload"] = True
    return body | {k: v for k, v in case.get("extra", {}).items() if k not in UNMODELLED}


def finetune_body(case: dict) -> dict:
    return {k: case[k] for k in FINETUNE_KEYS if k in case} | case.get("extra", {})


def refused(response) -> tuple[list[str], str]:
    answer = response.json()
    return [d["field"] for d in answer.get("detail", [])], answer.get("message", response.text)


def relax(body: dict, fields: list[str], extra: dict) -> tuple[dict, list[str]] | None:
    """`body` with each refused field the API lacks taken back to what it has, and what changed;
    None when a refused field is a real refusal (a value the API has a field for, and refuses)."""
    body, changes = copy.deepcopy(body), []
    for name in fields:
        if name == "precision" and str(body.get("precision")).startswith("fp8"):
            changes.append(f"{body['precision']} as bf16_mixed")
            body["precision"] = "bf16_mixed"
        elif name.startswith("limits.recompute") and "op_selective" in body["limits"]["recompute"]:
            changes.append("op_selective as selective")
            body["limits"]["recompute"] = ["selective"]
        elif name in PENDING or name in extra:
            parent = body["limits"] if name.startswith("limits.") else body
            parent.pop(name.removeprefix("limits."), None)
            changes.append(f"without {name}")
        else:
            return None
    return body, changes


def assumed(case: dict, note: str, *, plan: bool = True) -> str:
    """The case's note, the plan's unmodelled settings it names (plan: a training case), its assumptions."""
    if plan and (more := unmodelled(case)):
        note = f"{note}; {more}" if note else more
    if not case.get("assumed"):
        return note
    return (note + "; " if note else "") + "assumed: " + ", ".join(a.split(":")[0] for a in case["assumed"])


def joined(prefix: str, note: str) -> str:
    """What --loose changed, then the note."""
    return prefix + note if note else prefix.removesuffix(": ")


def refusal_rows(figures: dict, base: dict, note: str, fields: list[str], by: str) -> list[Row]:
    return [Row(kind=k, published=v, status="not expressible", note=note, refused_fields=fields,
                refused_by=by, **base) for k, v in figures.items()]


# --- pretraining ------------------------------------------------------------------------------------

def training_figure(kind: str, plan: dict, step: dict, case: dict) -> float | None:
    n = plan["num_gpus"]
    if kind == "tokens_per_sec_per_gpu":
        return step["tokens_per_sec"] / n
    if kind == "tflops_per_gpu":  # the FLOPs the source counts: model (no recompute) or hardware
        counted = "hardware" if case.get("tflops_count") == "hardware" else "model"
        return step[f"{counted}_flops_per_step"] / step["step_seconds"] / n / 1e12
    if kind == "peak_memory_gib":
        return step["memory_bytes"] / 2**30
    if kind == "peak_memory_gb":
        return step["memory_bytes"] / 1e9
    if kind == "gpu_hours":  # the run on the fastest fitting layout (the request carries training_tokens)
        return plan["run"]["gpu_hours"] if plan.get("run") else None
    return step[kind]  # tokens_per_sec, step_seconds, mfu, hfu


def gpu_memory_bytes(api: TestClient, case: dict) -> int:
    overridden = case.get("gpu_overrides", {}).get("memory_bytes")
    return overridden or api.get(f"/api/v1/hardware/{case['gpu']}").json()["memory_bytes"]


def training_rows(api: TestClient, case: dict, body: dict, loose: bool, changes: list[str]) -> list[Row]:
    figures = case["published"]
    base = dict(case=case["id"], source=case["source"], loose=loose, request=body)
    prefix = f"{', '.join(changes)}: " if changes else ""
    response = api.post(PLAN, json=body)
    if response.status_code != 200:
        fields, message = refused(response)
        note = f"{prefix}not expressible ({', '.join(fields)}): {message}"
        if case.get("convention"):
            note += f"; {case['convention']}"
        return refusal_rows(figures, base, note, fields, "api")
    plan = response.json()
    step = plan["best"][0] if plan["best"] else plan["least_memory"]
    if step is None:  # every candidate refused: a layout no framework runs, as the API sees it
        reasons = "; ".join(f"{k} ({plan['refusal_reasons'][k]})" for k in plan["refused"])
        note = f"{prefix}not expressible (search refused every layout: {reasons})"
        return refusal_rows(figures, base, note, sorted(plan["refused"]), "search")
    status, note = "ok", case.get("convention", "")
    if not plan["best"]:
        status = "no fit"
        short = (f"no fit: the closest layout needs {step['memory_bytes'] / 1e9:.1f} GB of "
                 f"{gpu_memory_bytes(api, case) / 1e9:.1f} GB")
        note = f"{short}; {note}" if note else short
    note = joined(prefix, assumed(case, note))
    return [Row(kind=k, published=v, predicted=training_figure(k, plan, step, case), status=status,
                note=note, layout=step["layout"], **base) for k, v in figures.items()]


def run_training(api: TestClient, case: dict, loose: bool) -> list[Row]:
    """The strict rows; with `loose`, also those of the nearest request the API answers."""
    body = training_body(case)
    rows = last = training_rows(api, case, body, False, [])
    changes: list[str] = []
    while loose and last[0].status == "not expressible":
        if last[0].refused_by == "api":
            relaxed = relax(body, last[0].refused_fields, case.get("extra", {}))
            if relaxed is None:
                break
            body, changed = relaxed
        elif "zero_with_pipeline" in last[0].refused_fields and body["limits"].get("zero_stage") != [1]:
            body = copy.deepcopy(body)  # FSDP or ZeRO 2/3 with pipelining: the nearest the API runs is ZeRO 1
            body["limits"]["zero_stage"] = [1]
            changed = ["ZeRO 2/3 with pipeline as ZeRO 1"]
        else:
            break
        changes += changed
        last = training_rows(api, case, body, True, changes)
        rows = [r for r in rows if not r.loose] + last
    return rows


# --- fine-tuning --------------------------------------------------------------------------------------

def longest_context(api: TestClient, body: dict) -> int:
    """The most tokens per sequence whose step fits: doubling, then bisection on `fits`."""
    def fits(seq: int) -> bool:
        return bool(api.post(FINETUNE, json=body | {"seq_len": seq}).json()["memory"]["fits"])

    if not fits(1):
        return 0
    low, high = 1, 2
    while high < MAX_SEQ and fits(high):
        low, high = high, min(2 * high, MAX_SEQ)
    if high == MAX_SEQ and fits(high):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def finetune_rows(api: TestClient, case: dict, body: dict, loose: bool, changes: list[str]) -> list[Row]:
    figures = case["published"]
    base = dict(case=case["id"], source=case["source"], loose=loose, request=body)
    prefix = f"{', '.join(changes)}: " if changes else ""
    # A longest-context case has no seq_len: this first request, at the published length, checks the rest.
    first = body | {"seq_len": body.get("seq_len") or figures.get("longest_context")}
    response = api.post(FINETUNE, json=first)
    if response.status_code != 200:
        fields, message = refused(response)
        note = f"{prefix}not expressible ({', '.join(fields)}): {message}"
        return refusal_rows(figures, base, note, fields, "api")
    total = response.json()["memory"]["torch_allocated_peak"]  # what torch.cuda's peak counters read
    note = joined(prefix, assumed(case, case.get("convention", ""), plan=False))
    predicted = {"peak_memory_gib": lambda: total / 2**30, "peak_memory_gb": lambda: total / 1e9,
                 "longest_context": lambda: longest_context(api, body)}
    return [Row(kind=k, published=v, predicted=predicted[k](), note=note, **base) for k, v in figures.items()]


def run_finetune(api: TestClient, case: dict, loose: bool) -> list[Row]:
    body = finetune_body(case)
    rows = finetune_rows(api, case, body, False, [])
    if not loose or rows[0].status != "not expressible":
        return rows
    relaxed = relax(body, rows[0].refused_fields, case.get("extra", {}))
    return rows if relaxed is None else rows + finetune_rows(api, case, relaxed[0], True, relaxed[1])


# --- the table and the summary -------------------------------------------------------------------------

def show(kind: str, value: float | None) -> str:
    if value is None:
        return "-"
    if kind in ("mfu", "hfu"):
        return f"{100 * value:.1f}%"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def print_table(rows: list[Row], beside: bool = False) -> None:
    extra = f" {'shaped %':>8s}" if beside else ""
    print(f"{'case':38s} {'figure':22s} {'predicted':>12s} {'published':>12s} {'error %':>8s}{extra}  note")
    for r in rows:
        err = "" if r.error_pct is None else f"{r.error_pct:+.1f}"
        name = ("~ " if r.loose else "") + r.case
        other = "" if not beside else f" {'' if r.shaped_error_pct is None else f'{r.shaped_error_pct:+.1f}':>8s}"
        print(f"{name:38s} {r.kind:22s} {show(r.kind, r.predicted):>12s} {show(r.kind, r.published):>12s} "
              f"{err:>8s}{other}  {r.note}")


def summary(rows: list[Row], label: str) -> list[str]:
    """Per figure kind: how many scored, the mean absolute percentage error, the share within 10%."""
    scored = [r for r in rows if r.error_pct is not None]
    lines = [f"{label}: MAPE per figure kind" + ("" if scored else ": no figure scored")]
    for kind in [*dict.fromkeys(r.kind for r in scored), "all figures"]:
        errs = [abs(r.error_pct) for r in scored if kind in (r.kind, "all figures")]
        if errs:
            lines.append(f"  {kind:24s} n={len(errs):3d}  MAPE {statistics.fmean(errs):6.1f}%  "
                         f"within 10%: {sum(e <= 10 for e in errs)}/{len(errs)}")
    return lines


def counts(rows: list[Row], cases: list[dict], what: str, loose: bool = False) -> str:
    status = {r.case: r.status for r in rows if r.loose == loose}
    ids = [c["id"] for c in cases if c["id"] in status]
    ok = sum(status[i] == "ok" for i in ids)
    nofit = sum(status[i] == "no fit" for i in ids)
    return (f"{what}: {len(ids)} cases, {ok + nofit} expressible ({ok} fit, {nofit} judged not to fit), "
            f"{len(ids) - ok - nofit} not expressible")


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--only", help="cases whose id or source contains this text")
    cli.add_argument("--loose", action="store_true",
                     help="also answer each refused case without the fields the API lacks (rows marked ~)")
    cli.add_argument("--json", metavar="PATH", help="write every row as JSON to PATH")
    cli.add_argument("--beside", choices=("shaped",),
                     help="also run every plan with matmul_time shaped and print its error beside the default's")
    cli.add_argument("--matmul-time", choices=("flat", "shaped"),
                     help="send this matmul_time with every plan (default: the API's, flat); shaped times each "
                          "GEMM from its shape, for the two models side by side")
    args = cli.parse_args()
    api = client()
    if args.matmul_time:
        SENT_WITH_EVERY_PLAN["matmul_time"] = args.matmul_time

    def picked(name: str) -> list[dict]:
        text = (args.only or "").lower()
        return [c for c in load(name) if text in f"{c['id']} {c['source']}".lower()]

    training, finetune = picked("training"), picked("finetune")
    rows = [r for c in training for r in run_training(api, c, args.loose)]
    if args.beside:
        SENT_WITH_EVERY_PLAN["matmul_time"] = args.beside
        other = {(r.case, r.kind, r.loose): r.error_pct for c in training for r in run_training(api, c, args.loose)}
        SENT_WITH_EVERY_PLAN.clear()
        for r in rows:
            r.shaped_error_pct = other.get((r.case, r.kind, r.loose))
    rows += [r for c in finetune for r in run_finetune(api, c, args.loose)]
    print_table(rows, beside=bool(args.beside))
    print()
    print("\n".join(summary([r for r in rows if not r.loose], "strict, the published setup as sent")))
    print(counts(rows, training, "pretraining"))
    print(counts(rows, finetune, "fine-tuning"))
    if args.loose:
        loose = [r for r in rows if r.loose]
        print("\n".join(summary(loose, "loose (~), refused fields taken back as each note says")))
        refused_ids = {r.case for r in loose}
        print(counts(rows, [c for c in training if c["id"] in refused_ids], "pretraining, loose", loose=True))
        print(counts(rows, [c for c in finetune if c["id"] in refused_ids], "fine-tuning, loose", loose=True))
    if args.json:
        out = [asdict(r) | {"error_pct": r.error_pct} for r in rows]  # shaped_error_pct with --beside
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
