"""The generate probe on CPU at tiny sizes: its cache holds what the KV-cache calculator says,
to the byte, for grouped-query, windowed (context past the window), mixture-of-experts and
latent attention; its peak memory is the serving prediction within 10%; its cached forward
computes what the model computes and the FLOPs the roofline counts (FlopCounterMode); and the
job page, `tally probe generate` and the jobs API carry it. Times are reported, never held to
the roofline on a CPU.

Expected cache bytes are worked by hand from each layout (values per token per layer x tokens
kept x layers x sequences x 4 bytes of float32), not read from kv_cache.py."""

import csv
import io
import subprocess
import sys
import time
from urllib.parse import urlencode

import pytest
import torch
from rich.console import Console
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from app.accounting.inference import roofline
from app.accounting.models import TransformerConfig
from app.bench import decode, generate
from app.bench.models import Transformer
from app.cli.probe import printed
from app.probes.registry import PROBES, RESULTS
from tests.support.api import assert_names_field
from tests.support.bench_jobs import finished
from tests.support.cli import run_main
from tests.support.hf_oracle import one_thread
from tests.support.jobs import run_all

JOBS = "/api/v1/jobs"
QUICK = {"warmup_s": 0.01, "measure_s": 0.01, "min_iters": 3, "max_iters": 5}
SWEEP = {"prompt_lens": [8, 48], "batch_sizes": [1, 3], "contexts": [12, 48], "decode_steps": 4}
LLAMA = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "mlp": "swiglu",
         "norm": "rmsnorm", "position": "rope", "bias": False, "tied_embeddings": False, "max_seq_len": 512}
WINDOW = 16
CONFIGS = {
    "llama-gqa": LLAMA,  # 4 query heads share 2 key/value heads of 16
    # Mistral-style window on layer 0, layer 1 global (global_every 2): contexts 12 and 48 sit
    # below and past it.
    "windowed": LLAMA | {"sliding_window": WINDOW, "global_every": 2},
    "moe": LLAMA | {"n_experts": 4, "top_k": 2, "d_ff_expert": 96},
    "mla": LLAMA | {"q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                    "v_head_dim": 16},
}
NAMES = list(CONFIGS)


def quiet(*_):
    return None


def engine(name: str) -> TransformerConfig:
    return TransformerConfig(**CONFIGS[name])


def cache_bytes(name: str, context: int, batch: int) -> int:
    """By hand: K and V of 2 heads x 16 per layer (64 values), or the latent 32 + rope key 8
    (40 values); a windowed layer keeps min(context, window) tokens; 2 layers; float32."""
    if name == "mla":
        return 2 * (32 + 8) * context * batch * 4
    kept = [min(context, WINDOW), context] if name == "windowed" else [context, context]
    return sum(2 * 2 * 16 * tokens for tokens in kept) * batch * 4


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    """Tiny ops on a shared two-core box run many times faster on one thread than waiting for
    OpenMP's second; the figures checked here do not depend on it."""
    with one_thread():
        yield


@pytest.fixture(scope="module")
def runs(single_thread) -> dict[str, dict]:
    # eager only here: graph mode compiles each shape (test_graph_mode_... runs it once)
    return {name: generate.run(QUICK | SWEEP | {"model": cfg, "modes": ["eager"]}, quiet)
            for name, cfg in CONFIGS.items()}


@pytest.mark.parametrize("name", NAMES)
def test_the_cache_holds_what_the_calculator_says_and_peak_memory_is_within_10_percent(runs, name):
    result = runs[name]
    assert result["weights_bytes"] == 4 * sum(p.numel() for p in Transformer(engine(name)).parameters())
    prefill = {p["prompt_len"]: p for p in result["prefill"]}
    decoded = {(d["batch_size"], d["context"]): d for d in result["decode"]}
    assert sorted(prefill) == [8, 48] and sorted(decoded) == [(1, 12), (1, 48), (3, 12), (3, 48)]
    for (batch, context), point in [*(((1, n), p) for n, p in prefill.items()), *decoded.items()]:
        memory, expected = point["memory"], cache_bytes(name, context, batch)
        assert memory["kv_cache_bytes"] == memory["predicted"]["kv_cache"] == expected
        assert abs(memory["relative_error"]) < 0.10, (batch, context, memory)
        assert memory["predicted"]["total"] == sum(v for k, v in memory["predicted"].items() if k != "total")


@pytest.mark.parametrize("name", NAMES)
def test_times_are_reported_as_positive_figures_beside_the_roofline(runs, name):
    result = runs[name]
    assert result["cuda_graphs"] is False and result["ops_per_decode_step"] > 0
    assert result["ceilings"]["matmul_flop_per_sec"] > 0 and result["ceilings"]["bandwidth_bytes_per_sec"] > 0
    for point in [*result["prefill"], *result["decode"]]:
        t, predicted = point["time"], point["predicted"]
        assert 0 < t["best"] <= t["median"] and predicted["seconds"] > 0 and point["tokens_per_sec"] > 0
        assert predicted["relative_error"] == pytest.approx(predicted["seconds"] / t["median"] - 1)
    for d in result["decode"]:
        assert d["tokens_per_sec"] == pytest.approx(d["batch_size"] / d["time"]["median"])
        assert d["ops_per_step"] > 0
        assert d["achieved_bytes_per_sec"] == pytest.approx(d["predicted"]["bytes"] / d["time"]["median"])
    assert any("eager mode: each op of a step is launched from Python" in n for n in result["notes"])
    assert result["graphed"] == [] and result["graph_capture"] is None  # modes: eager only


def _positions(cfg: TransformerConfig, model: Transformer, ids: torch.Tensor, split: int) -> torch.Tensor:
    """Logits of positions split-1 .. end through the cache: the prompt ids[:, :split] prefilled,
    then one token per step."""
    cache = decode.allocate(cfg, batch=ids.shape[0], context=ids.shape[1], dtype=torch.float32,
                            device=torch.device("cpu"))
    out = [decode.forward(model, ids[:, :split], cache, 0)]
    out += [decode.forward(model, ids[:, p:p + 1], cache, p) for p in range(split, ids.shape[1])]
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("name", ["llama-gqa", "moe", "mla"])
def test_decoding_through_the_cache_computes_what_the_model_computes(name):
    """Against the training forward of the same weights over the whole sequence (latent
    attention there decompressed, here absorbed)."""
    cfg = engine(name)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = torch.randint(cfg.vocab_size, (2, 24))
    with torch.no_grad():
        whole = model(ids)[:, 15:]
    torch.testing.assert_close(_positions(cfg, model, ids, 16), whole, rtol=1e-4, atol=1e-4)


def test_a_windowed_layers_ring_gives_what_attending_within_the_window_gives():
    """Decoding past the window through a ring of 16 slots, against one prefill of the whole
    sequence with a band mask (query i reads keys i-15 .. i)."""
    cfg = engine("windowed")
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = torch.randint(cfg.vocab_size, (2, 40))
    ring = _positions(cfg, model, ids, 8)[:, -1]
    band = decode.allocate(cfg, batch=2, context=40, dtype=torch.float32, device=torch.device("cpu"))
    torch.testing.assert_close(ring, decode.forward(model, ids, band, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_a_decode_step_and_a_prefill_do_the_flops_the_roofline_counts(name):
    """FlopCounterMode (SDPA's math kernel, which it can count) over one decode step of 3
    sequences at context 40 (past the window) and one 24-token prefill."""
    cfg = engine(name)
    model = Transformer(cfg).eval()
    cpu = torch.device("cpu")
    cache = decode.allocate(cfg, batch=3, context=40, dtype=torch.float32, device=cpu)
    decode.prefill(model, torch.randint(cfg.vocab_size, (3, 39)), cache)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as step:
        decode.decode(model, torch.randint(cfg.vocab_size, (3, 1)), cache, 39, 1)
    assert step.get_total_flops() == 3 * roofline.decode_flops(cfg, context=40, mla_cache="latent")
    fresh = decode.allocate(cfg, batch=1, context=24, dtype=torch.float32, device=cpu)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as prompt:
        decode.prefill(model, torch.randint(cfg.vocab_size, (1, 24)), fresh)
    assert prompt.get_total_flops() == roofline.prefill_flops(cfg, prompt=24, causal="full")


def test_the_job_page_sets_each_measurement_beside_its_prediction(make_api, runs):
    api = make_api()
    result = RESULTS.validate_python(runs["windowed"])
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, result)}").text
    for table in ("generate-prefill", "generate-decode", "generate-decode-memory"):
        assert f'data-testid="{table}"' in page
    widest = max(result.decode, key=lambda d: (d.batch_size, d.context))
    kv = f"{widest.memory.kv_cache_bytes:,}"
    assert page.count(f"<td>{kv}</td>") >= 2  # measured and predicted, side by side
    for key in ("decode_tokens", "decode_step", "decode_roofline", "decode_bandwidth", "prefill_tokens",
                "memory"):
        assert f'data-testid="metric-{key}"' in page
    assert "CUDA graphs: not used" in page and "batch 3, context 48" in page
    other = finished(api.app.state.store, RESULTS.validate_python(runs["llama-gqa"]))
    compare = api.get(f"/benchmarks/compare?a={other}&b={other - 1}").text
    assert "decode tokens/s (median step)" in compare


def test_tally_probe_generate_lists_its_options_and_prints_its_tables(capsys, runs):
    status, out, _ = run_main(capsys, "probe", "generate", "--help")
    assert status == 0
    for option in ("--model", "--dtype", "--prompt-lens", "--batch-sizes", "--contexts", "--decode-steps",
                   "--timeout", "--output"):
        assert option in out
    console = Console(file=io.StringIO(), width=400)
    for part in printed(RESULTS.validate_python(runs["mla"])):
        console.print(part)
    text = console.file.getvalue()
    assert "KV cache bytes" in text and "launch floor ms" in text and "absorbed" in text


def test_a_generate_job_runs_in_a_child_and_exports_a_row_per_measurement(make_api):
    api = make_api()
    body = {"probe": "generate", "params": QUICK | {"model": LLAMA, "prompt_lens": [8], "batch_sizes": [2],
                                                  "contexts": [12], "decode_steps": 2,
                                                  "modes": ["eager", "graph"]}}
    job_id = api.post(JOBS, body).json()["id"]
    run_all(api)
    job = api.get(f"{JOBS}/{job_id}").json()
    assert job["status"] == "succeeded", job["error"]
    assert job["result"]["probe"] == "generate" and job["result"]["decode"][0]["context"] == 12
    exported = api.get(f"{JOBS}/{job_id}/result", params={"format": "csv"}).text
    rows = list(csv.DictReader(exported.splitlines()))
    # the graph-mode point beside the eager one
    assert [(r["phase"], r["prompt_len"] or r["context"]) for r in rows] == [
        ("prefill", "8"), ("decode", "12"), ("graphed", "12"), ("graphed_prefill", "8")]
    assert float(rows[2]["launch_overhead_seconds"]) == pytest.approx(
        float(rows[1]["time.median"]) - float(rows[2]["time.median"]))
    assert rows[1]["memory.kv_cache_bytes"] == str(cache_bytes("llama-gqa", 12, 2))


def test_the_launch_form_submits_a_generate_job(make_api):
    api = make_api()
    form = {"probe": "generate", "device": "cpu", "gen_model": "gpt2", "gen_batch_sizes": "1, 2",
            "gen_contexts": "64", "gen_prompt_lens": "", "model": "cruncher"}  # train_step's, ignored
    response = api.post("/ui/benchmarks/launch", content=urlencode(form),
                        headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200 and "HX-Trigger" in response.headers, response.text
    [job] = api.get(JOBS).json()["data"]
    given = {"device": "cpu", "model": "gpt2", "batch_sizes": [1, 2], "contexts": [64], "prompt_lens": None}
    assert {k: job["params"][k] for k in given} == given


@pytest.mark.parametrize("params,field", [
    ({"contexts": [64, 4], "decode_steps": 8}, "params.contexts.1"),  # no prompt before 8 steps
    ({"decode_steps": 64}, "params.decode_steps"),  # the CPU default contexts start at 64
    ({"prompt_lens": [16, 4096]}, "params.prompt_lens.1"),  # the CPU default model has 2048 positions
    ({"model": "gpt2", "contexts": [2048]}, "params.contexts.0"),
    ({"batch_sizes": [0]}, "params.batch_sizes.0"),
    ({"dtype": "int8"}, "params.dtype"),
    ({"model": "gemma-2-9b"}, "params.model.attn_logit_softcapping"),
    ({"model": "gpt-oss-20b"}, "params.model.attention_sinks"),
    ({"model": "llama4-scout"}, "params.model.attention_chunk_size"),
    ({"model": "qwen3-next-80b-a3b"}, "params.model.layer_mixers"),
    ({"model": LLAMA | {"kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
                        "sliding_window": 8}}, "params.model.sliding_window"),
    ({"model": "llama3.1-405b"}, "params.model"),  # 1.6 TB of float32 weights fit no host here
])
def test_bad_parameters_are_422s_naming_the_field(make_api, params, field):
    api = make_api()
    assert_names_field(api.post(JOBS, {"probe": "generate", "params": {"device": "cpu"} | params}), field)
    assert api.get(JOBS).json()["count"] == 0


def test_least_seconds_is_a_floor_of_the_real_run():
    probe = PROBES["generate"]
    raw = QUICK | {"warmup_s": 0.02, "model": LLAMA, "prompt_lens": [8], "batch_sizes": [1], "contexts": [12]}
    least, field = probe.least_seconds(probe.params.model_validate(raw), "cpu")
    assert least == pytest.approx(0.02 * 5) and field == "params.warmup_s"
    start = time.perf_counter()
    generate.run(raw, quiet)
    assert time.perf_counter() - start >= least


def test_sizing_a_generate_job_never_imports_torch():
    script = ("import sys\nfrom app.probes.registry import PROBES\n"
              "from app.probes.generate.params import GenerateParams\n"
              "for kind in ('cpu', 'cuda'):\n    PROBES['generate'].need(GenerateParams(), kind)\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_graph_mode_decodes_what_eager_decodes_and_reports_both(single_thread):
    """The fixed-shape step (app/bench/graphed.py), compiled by torch.compile on this CPU, gives the
    tokens and cache eager decoding gives, step by step; the probe then reports both modes."""
    from app.bench import graphed

    cfg = TransformerConfig(**(CONFIGS["windowed"] | {"max_seq_len": 64}))
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    batch, context, steps = 2, 40, 6  # the windowed layer's ring wraps: 40 tokens past its 16
    start = context - steps
    caches = [decode.allocate(cfg, batch=batch, context=context, dtype=torch.float32,
                              device=torch.device("cpu")) for _ in range(2)]
    prompt = torch.randint(cfg.vocab_size, (batch, start))
    for cache in caches:
        for i in range(batch):
            decode.prefill(model, prompt[i:i + 1], cache.row(i))
    ids = torch.randint(cfg.vocab_size, (batch, 1))
    static = graphed.StaticDecode(model, caches[1], batch)
    static.start(ids, start)
    step, capture = graphed.prepare(static, cuda=False)
    assert capture == ("torch.compile" if graphed.compiler_present() else "static eager")
    eager = ids
    for i in range(steps):
        eager = decode.sample(decode.forward(model, eager, caches[0], start + i))
        step()
        assert torch.equal(static.ids, eager), i
    for a, b in zip(caches[0].tensors(), caches[1].tensors(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    # The prefill compiled on its own writes the cache and picks the first token eager prefill does.
    run, how = graphed.compiled_prefill(cuda=False)
    assert how == capture
    fresh = [decode.allocate(cfg, batch=1, context=start, dtype=torch.float32, device=torch.device("cpu"))
             for _ in range(2)]
    with torch.no_grad():
        assert torch.equal(run(model, prompt[:1], fresh[1]), decode.prefill(model, prompt[:1], fresh[0]))
    for a, b in zip(fresh[0].tensors(), fresh[1].tensors(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    result = generate.run(QUICK | {"model": CONFIGS["llama-gqa"], "prompt_lens": [8], "batch_sizes": [2],
                                   "contexts": [24], "decode_steps": 4, "modes": ["eager", "graph"]}, quiet)
    (point,) = result["graphed"]
    assert result["graph_capture"] == capture and point["batch_size"] == 2 and point["context"] == 24
    assert point["time"]["median"] > 0
    assert point["launch_overhead_seconds"] == pytest.approx(point["eager_seconds"] - point["time"]["median"])
    assert point["eager_seconds"] == result["decode"][0]["time"]["median"]
    (compiled,) = result["graphed_prefill"]
    assert result["prefill_capture"] == how and compiled["prompt_len"] == 8 and compiled["time"]["median"] > 0
    assert compiled["eager_seconds"] == result["prefill"][0]["time"]["median"]
    assert compiled["overhead_seconds"] == pytest.approx(compiled["eager_seconds"] - compiled["time"]["median"])
    console = Console(file=io.StringIO(), width=400)
    for part in printed(RESULTS.validate_python(result)):
        console.print(part)
    said = console.file.getvalue()
    assert "eager beside graph mode" in said and "eager beside compiled on its own" in said


def test_graph_mode_is_refused_by_name_where_decode_is_data_dependent():
    from app.probes.generate import plan
    from app.probes.generate.params import GenerateParams

    for name in ("moe", "mla"):
        with pytest.raises(Exception) as refused:
            plan.generate(GenerateParams.model_validate({"model": CONFIGS[name], "modes": ["graph"]}), False)
        assert getattr(refused.value, "field", None) == "params.modes"
        short = {"model": CONFIGS[name], "prompt_lens": [8], "contexts": [16]}  # within max_seq_len
        assert plan.generate(GenerateParams.model_validate(short), True).modes == ("eager",)
    # a dense model: both modes by default on CUDA, where capture is cheap; eager on a CPU, whose
    # graph mode is an inductor build per batch shape
    dense = GenerateParams.model_validate({"model": CONFIGS["llama-gqa"], "prompt_lens": [8], "contexts": [16]})
    assert plan.generate(dense, True).modes == ("eager", "graph")
    assert plan.generate(dense, False).modes == ("eager",)
