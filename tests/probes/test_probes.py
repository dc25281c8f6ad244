"""Every probe end to end on CPU, at small sizes, checked against torch itself."""

import json
import subprocess
import sys

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from app.accounting.models import TransformerConfig
from app.bench import bandwidth, matmul, train_step, transfer
from app.bench.models import RMSNorm, Transformer
from app.bench.timer import Timer, summarize
from app.probes.matmul import MatmulParams, matmul_shapes

QUICK = {"warmup_s": 0.01, "measure_s": 0.01, "min_iters": 3, "max_iters": 5}


def quiet(*_):
    return None


def matmul_flops(m, k, n, dtype=torch.float32):
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    with FlopCounterMode(display=False) as counter:
        torch.matmul(a, b)
    return counter.get_total_flops()


def test_summary_statistics_agree_with_torch_quantile():
    seconds = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.4]
    stats = summarize(seconds)
    data = torch.tensor(seconds, dtype=torch.float64)
    assert stats.median == pytest.approx(torch.quantile(data, 0.5).item())
    assert stats.p20 == pytest.approx(torch.quantile(data, 0.2).item())
    assert stats.p80 == pytest.approx(torch.quantile(data, 0.8).item())
    assert stats.mean == pytest.approx(data.mean().item())
    assert stats.best == min(seconds) and stats.iterations == len(seconds)


def test_timer_warms_up_then_flushes_before_every_timed_run(monkeypatch):
    timer = Timer(torch.device("cpu"), warmup_s=0.0, measure_s=0.0, min_iters=4, max_iters=9)
    events = []
    monkeypatch.setattr(timer, "flush", lambda: events.append("flush"))
    stats = timer.measure(lambda: events.append("run"))
    assert stats.iterations == 4
    warm = events.index("flush")
    assert warm >= 1 and set(events[:warm]) == {"run"}  # at least one untimed run first
    assert events[warm:] == ["flush", "run"] * 4
    assert timer.flush_bytes >= 32 * 2**20


def test_matmul_on_cpu_reports_exact_flops_and_no_mfu():
    result = matmul.run(QUICK | {"sweep": "custom", "shapes": [{"m": 48, "k": 32, "n": 16},
                                                               {"m": 40, "k": 24, "n": 8}],
                                 "dtypes": ["float32", "bfloat16", "tfloat32", "float8_e4m3fn"]}, quiet)
    points = {(p["m"], p["dtype"]): p for p in result["points"]}
    assert set(points) == {(48, "float32"), (40, "float32"), (48, "bfloat16"), (40, "bfloat16"),
                           (48, "float8_e4m3fn")}
    for p in points.values():
        assert p["flops"] == matmul_flops(p["m"], p["k"], p["n"])
        t = p["time"]
        assert t["best"] <= t["p20"] <= t["median"] <= t["p80"]
        assert p["flop_per_sec"] == pytest.approx(p["flops"] / t["median"])
        assert p["mfu"] is None and p["peak_flop_per_sec"] is None
    skipped = {s["what"]: s["reason"] for s in result["skipped"]}
    assert "tfloat32" in skipped and "float8_e4m3fn 40x24x8" in skipped  # 8 is no multiple of 16
    best = result["best"]["float32"]
    assert best["flop_per_sec"] == max(p["flop_per_sec"] for p in result["points"] if p["dtype"] == "float32")
    env = result["environment"]
    assert env["device"] == "cpu" and env["torch_version"] == torch.__version__ and env["seed"] == 0


def test_matmul_default_sweeps_on_cpu():
    params = MatmulParams.model_validate({})
    assert matmul_shapes(params, "cpu") == [(128, 128, 128), (256, 256, 256), (512, 512, 512)]
    assert matmul_shapes(params, "cuda")[-1] == (16384, 16384, 16384)
    quick = MatmulParams.model_validate({"sweep": "quick"})
    shapes = matmul_shapes(quick, "cuda")
    assert shapes[0] == (256, 4096, 4096) and shapes[-1] == (4096, 4096, 4096) and len(shapes) == 16


def test_bandwidth_counts_bytes_read_and_written():
    result = bandwidth.run(QUICK | {"size_bytes": 2**20}, quiet)
    assert result["size_bytes"] == 2**20 and result["bytes_moved"] == 2 * 2**20
    assert result["gb_per_sec"] == pytest.approx(2 * 2**20 / result["time"]["median"] / 1e9)
    assert result["percent_of_catalogue"] is None


def test_transfer_sweeps_both_directions_with_and_without_non_blocking():
    result = transfer.run(QUICK | {"sizes_bytes": [4096, 65536]}, quiet)
    keys = {(p["size_bytes"], p["direction"], p["host_memory"], p["non_blocking"]) for p in result["points"]}
    assert len(keys) == len(result["points"]) == 2 * 2 * 2
    assert {k[2] for k in keys} == {"pageable"}
    assert result["skipped"][0]["what"] == "pinned"


def test_seed_makes_runs_repeatable():
    body = QUICK | {"model": {"kind": "cruncher", "dim": 32, "num_layers": 2}, "batch_size": 2, "seq_len": 4,
                    "steps": 2, "warmup_steps": 1, "seed": 7}
    a, b = train_step.run(body, quiet), train_step.run(body, quiet)
    assert a["loss_first"] == b["loss_first"] and a["loss_last"] == b["loss_last"]
    assert train_step.run(body | {"seed": 8}, quiet)["loss_first"] != a["loss_first"]


LLAMA_LIKE = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
              "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False, "tied_embeddings": False}
GPT_LIKE = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 64}
# Attention biases without MLP biases (as a llama config with attention_bias true writes it).
SPLIT_BIAS = LLAMA_LIKE | {"attn_bias": True, "mlp_bias": False}


@pytest.mark.parametrize("model", [{"kind": "cruncher", "dim": 64, "num_layers": 3}, GPT_LIKE, LLAMA_LIKE],
                         ids=["cruncher", "gpt", "llama"])
@pytest.mark.parametrize("precision", ["fp32", "bf16_autocast"])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam", "adamw"])
def test_train_step_predicts_peak_memory_within_10_percent(model, precision, optimizer):
    result = train_step.run(QUICK | {"model": model, "batch_size": 2, "seq_len": 64, "optimizer": optimizer,
                                     "precision": precision, "steps": 2, "warmup_steps": 1}, quiet)
    mem = result["memory"]
    assert abs(mem["relative_error"]) < 0.10, mem
    pred = mem["predicted"]
    phases = ("start_of_backward", "lm_head_weight_gradient", "end_of_backward", "optimizer_step")
    assert pred["total"] == max(pred[k] for k in phases if k in pred)
    states = 0 if optimizer == "sgd" else (1 if optimizer == "adagrad" else 2)
    assert mem["predicted"]["optimizer_state"] == states * 4 * result["params"]
    assert result["loss_last"] < result["loss_first"] or optimizer == "sgd"
    assert result["mfu"] is None
    split = result["forward"]["median"] + result["backward"]["median"] + result["optimizer_step"]["median"]
    assert result["step"]["best"] <= split * 1.5


def _bench_model(cfg: dict):
    engine = TransformerConfig(**cfg)
    torch.manual_seed(0)
    return engine, Transformer(engine)


@pytest.mark.parametrize("cfg", [GPT_LIKE, LLAMA_LIKE, SPLIT_BIAS], ids=["gpt", "llama", "split-bias"])
def test_train_step_flops_and_params_match_torch(cfg):
    """The model trained is the one the calculators describe: FlopCounterMode counts the
    same step FLOPs, and its parameters sum to the count reported."""
    result = train_step.run(QUICK | {"model": cfg, "batch_size": 2, "seq_len": 32, "steps": 1,
                                     "warmup_steps": 1}, quiet)
    _, model = _bench_model(cfg)
    assert result["params"] == sum(p.numel() for p in model.parameters())
    ids = torch.randint(cfg["vocab_size"], (2, 32))
    # The math kernel spells attention out as matmuls, which FlopCounterMode counts
    # (it has no formula for the CPU flash kernel).
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        logits = model(ids)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    assert result["flops_per_step"] == counter.get_total_flops()


def test_cruncher_flops_match_torch():
    result = train_step.run(QUICK | {"model": {"kind": "cruncher", "dim": 32, "num_layers": 3},
                                     "batch_size": 2, "seq_len": 8, "steps": 1, "warmup_steps": 1}, quiet)
    from app.bench.models import Cruncher
    model = Cruncher(32, 3)
    x = torch.randn(2, 8, 32)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.mse_loss(model(x), torch.randn(2, 8)).backward()
    assert result["flops_per_step"] == counter.get_total_flops()
    assert result["params"] == 3 * 32 * 32 + 32


def test_fused_rmsnorm_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    ours = RMSNorm(16, eps=1e-6).double()
    ref = torch.nn.RMSNorm(16, eps=1e-6).double()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(ours.weight)
    grad = torch.randn(3, 5, 16, dtype=torch.float64)
    ours(x).backward(grad)
    g_ours, w_ours = x.grad.clone(), ours.weight.grad.clone()
    x.grad = None
    ref(x).backward(grad)
    torch.testing.assert_close(g_ours, x.grad)
    torch.testing.assert_close(w_ours, ref.weight.grad)


def run_child(job: dict) -> tuple[int, list[dict]]:
    """The child's protocol: stdin stays open while it works (EOF would mean we died)."""
    proc = subprocess.Popen([sys.executable, "-m", "app.bench.child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write(json.dumps(job) + "\n")
    proc.stdin.flush()
    out = proc.stdout.read()
    proc.stdin.close()
    return proc.wait(timeout=120), [json.loads(line) for line in out.splitlines()]


def test_child_speaks_json_lines():
    job = {"job_id": 1, "probe": "matmul",
           "params": QUICK | {"sweep": "custom", "shapes": [{"m": 8, "k": 8, "n": 8}], "dtypes": ["float32"]}}
    code, messages = run_child(job)
    assert code == 0
    assert [m["type"] for m in messages] == ["progress", "progress", "result"]
    assert messages[-1]["result"]["points"][0]["flops"] == 2 * 8 * 8 * 8


def test_a_parent_that_closes_stdin_after_the_result_keeps_the_jobs_exit_code():
    """End-of-file on stdin means a dead parent only while the job runs: once the result is
    written, a parent that closes the pipe at once still sees exit code 0 (it once saw 3)."""
    job = {"job_id": 1, "probe": "matmul",
           "params": QUICK | {"sweep": "custom", "shapes": [{"m": 8, "k": 8, "n": 8}], "dtypes": ["float32"]}}
    codes = []
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-m", "app.bench.child"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        while json.loads(proc.stdout.readline())["type"] != "result":
            pass
        proc.stdin.close()
        codes.append(proc.wait(timeout=120))
        proc.stdout.close()
    assert codes == [0] * 5


def test_child_reports_bad_params_as_failed():
    code, messages = run_child({"job_id": 1, "probe": "bandwidth", "params": {"size_bytes": 1}})
    assert code == 1 and messages[-1]["status"] == "failed"
    assert "size_bytes" in messages[-1]["error"]["message"]


def test_child_exits_when_its_parent_goes():
    proc = subprocess.Popen([sys.executable, "-m", "app.bench.child"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write(json.dumps({"job_id": 1, "probe": "matmul", "params": {"warmup_s": 60}}) + "\n")
    proc.stdin.close()  # what the parent's death looks like from here
    assert proc.wait(timeout=60) == 3


def test_train_step_under_torch_compile_trains_the_same_model():
    """compile: inductor's kernels (a C compiler on this CPU) compute the eager step's loss on the same
    seed and batch, and the result says it was compiled. Times are not compared on a shared CPU."""
    body = QUICK | {"model": {"vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 2, "mlp": "swiglu",
                              "norm": "rmsnorm", "position": "rope", "bias": False, "max_seq_len": 64},
                    "batch_size": 2, "seq_len": 16, "steps": 2, "warmup_steps": 1, "optimizer": "sgd"}
    eager, compiled = train_step.run(body, quiet), train_step.run(body | {"compile": True}, quiet)
    assert (eager["compiled"], compiled["compiled"]) == (False, True)
    assert compiled["loss_first"] == pytest.approx(eager["loss_first"], rel=1e-4)
    assert compiled["flops_per_step"] == eager["flops_per_step"]
    assert any("torch.compile" in a for a in compiled["assumptions"])
