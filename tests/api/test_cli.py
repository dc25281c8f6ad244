"""`tally calc` and `tally probe`: the API's answers and messages from the shell, help at
every level, no database or torch in calc, and real probes on the CPU.

Numbers are checked against the course's formulas and datasheet figures, and every answer
and refusal against the real app's for the same body (tests/support/api.py's Api)."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.api import router as api_router
from app.cli import options
from app.cli.probe import printed
from app.config import Settings
from app.jobs.store import Store
from app.main import create_app
from app.numbers import percent, sig
from app.probes.registry import RESULTS
from tests.support import ROOT
from tests.support.api import Api
from tests.support.cli import TALLY, run_main, tally
from tests.support.waiting import wait_for
from tests.support.devices import H100_REPORTED_BYTES

# Probes small enough to take a second on two CPU cores (cf. tests/probes/test_probes.py).
FAST = ["--warmup-s", "0", "--measure-s", "0.005", "--min-iters", "2", "--max-iters", "3"]
SHAPES = [{"m": 48, "k": 32, "n": 16}, {"m": 64, "k": 16, "n": 8}]
H100_BF16_DENSE_FLOP_PER_SEC = 989.5e12  # NVIDIA's 1,979 TFLOP/s with 2:4 sparsity, halved
H100_MEMORY_BYTES = H100_REPORTED_BYTES  # the device's report, not the datasheet's "80GB"


# --- calc: the course's numbers -------------------------------------------------------------------

def test_time_training_is_the_courses_143_9_days(capsys):
    status, out, _ = run_main(capsys, "calc", "time", "training", "--params", "70e9", "--tokens", "15e12",
                              "--gpu", "h100-sxm", "--dtype", "bf16", "--num-gpus", "1024", "--mfu", "0.5")
    assert status == 0
    answer = json.loads(out)
    flops = 6 * 70e9 * 15e12
    days = flops / (1024 * H100_BF16_DENSE_FLOP_PER_SEC * 0.5) / 86_400
    assert answer["flops"] == pytest.approx(flops, rel=1e-12)
    assert answer["days"] == pytest.approx(days, rel=1e-12)
    assert round(answer["days"], 1) == 143.9


def test_max_model_is_memory_over_16_bytes_per_param(capsys):
    status, out, _ = run_main(capsys, "calc", "memory", "max-model", "--gpu", "h100-sxm", "--num-gpus", "8",
                              "--precision", "fp32", "--optimizer", "adamw")
    assert status == 0
    # fp32 with Adam: 4 (weights) + 4 (gradients) + 8 (two moments) bytes per parameter.
    assert json.loads(out)["max_params"] == 8 * H100_MEMORY_BYTES // 16  # 42.5B: the course's 80e9 gives 40B


# --- calc: the API's answers and refusals, byte for byte ------------------------------------------

# d_model 256: AWQ's groups of 128 divide every matrix's inputs, so /fit answers for each format.
SMALL = {"n_layers": 2, "d_model": 256, "n_heads": 4, "vocab_size": 100}
SAME_AS_API = [
    (["flops", "transformer", "--model", "llama3-8b", "--seq-len", "8192", "--causal", "halved"],
     "POST", "/api/v1/flops/transformer", {"model": "llama3-8b", "seq_len": 8192, "causal": "halved"}),
    (["flops", "mlp", "--batch", "1024", "--dims", "256,256,64"],
     "POST", "/api/v1/flops/mlp", {"batch": 1024, "dims": [256, 256, 64]}),
    (["memory", "training", "--model", "llama2-7b", "--seq-len", "4096", "--recompute", "selective",
      "--zero-stage", "1", "--data-parallel", "8", "--gpu", "h100-sxm"],
     "POST", "/api/v1/memory/training", {"model": "llama2-7b", "seq_len": 4096, "recompute": "selective",
                                         "zero_stage": 1, "data_parallel": 8, "gpu": "h100-sxm"}),
    (["memory", "training", "--model", "7e9", "--gpu-overrides", '{"memory_bytes": 40e9}',
      "--gpu", "a100-80gb"],
     "POST", "/api/v1/memory/training",
     {"model": 7e9, "gpu": "a100-80gb", "gpu_overrides": {"memory_bytes": 40e9}}),
    (["tensors", "layout", "--shape", "3,2", "--stride", "[1, 3]", "--index", "2,1", "--view-shape", "2,3"],
     "POST", "/api/v1/tensors/layout",
     {"shape": [3, 2], "stride": [1, 3], "index": [2, 1], "view_shape": [2, 3]}),
    (["dtypes", "encode", "--value", "0.15625", "--dtype", "float32"],
     "POST", "/api/v1/dtypes/encode", {"value": 0.15625, "dtype": "float32"}),
    (["dtypes", "encode", "--value", '"0.1"', "--dtype", "bf16"],
     "POST", "/api/v1/dtypes/encode", {"value": "0.1", "dtype": "bf16"}),
    (["time", "mfu", "--flops", "5.05e16", "--seconds", "16", "--gpu", "h100-sxm", "--num-gpus", "8"],
     "POST", "/api/v1/time/mfu", {"flops": 5.05e16, "seconds": 16, "gpu": "h100-sxm", "num_gpus": 8}),
    (["models", "import", "--json", json.dumps({"model_type": "gpt2"})],
     "POST", "/api/v1/models/import", {"model_type": "gpt2"}),
    (["hardware", "get", "h100-sxm"], "GET", "/api/v1/hardware/h100-sxm", None),
    # A POST to the group's own path: the group is the command, no ACTION.
    (["fit", "--model", "llama3-8b", "--gpu", "rtx-4090", "--seq-len", "2048"],
     "POST", "/api/v1/fit", {"model": "llama3-8b", "gpu": "rtx-4090", "seq_len": 2048}),
    (["fit", "--model", json.dumps(SMALL), "--gpu", "l4", "--seq-len", "128", "--batch-size", "4",
      "--lora-rank", "8", "--recompute", "full"],
     "POST", "/api/v1/fit", {"model": SMALL, "gpu": "l4", "seq_len": 128, "batch_size": 4, "lora_rank": 8,
                             "recompute": "full"}),
    (["finetune", "--model", "llama3-8b", "--mode", "qlora", "--gpu", "rtx-4090", "--seq-len", "2048",
      "--recompute", "full", "--lora-targets", "q,k,v,o"],
     "POST", "/api/v1/finetune", {"model": "llama3-8b", "mode": "qlora", "gpu": "rtx-4090", "seq_len": 2048,
                                  "recompute": "full", "lora_targets": ["q", "k", "v", "o"]}),
    (["models", "list"], "GET", "/api/v1/models", None),
    (["dtypes", "get", "fp8"], "GET", "/api/v1/dtypes/fp8", None),
]


@pytest.mark.parametrize(("argv", "method", "path", "body"), SAME_AS_API, ids=lambda v: None)
def test_calc_answers_as_the_api_does(capsys, api, argv, method, path, body):
    expected = api.request(method, path, json=body)
    assert expected.status_code == 200, expected.text
    status, out, err = run_main(capsys, "calc", *argv, "--compact")
    assert (status, err) == (0, "")
    assert out == expected.text + "\n"  # the API's bytes
    status, out, _ = run_main(capsys, "calc", *argv)
    assert status == 0 and json.loads(out) == expected.json() and out.count("\n") > 1  # indented


INLINE_GQA = {"n_layers": 2, "d_model": 64, "n_heads": 8, "n_kv_heads": 3, "vocab_size": 100}
REFUSED = [
    (["flops", "transformer", "--model", "gpt2", "--batch-size", "-1"], "/api/v1/flops/transformer",
     {"model": "gpt2", "batch_size": -1}, "batch_size"),
    (["flops", "transformer", "--model", json.dumps(INLINE_GQA)], "/api/v1/flops/transformer",
     {"model": INLINE_GQA}, "model.n_kv_heads"),
    (["memory", "training", "--model", "llama9"], "/api/v1/memory/training", {"model": "llama9"}, "model"),
    (["time", "training", "--params", "70e9", "--gpu", "h100-sxm"], "/api/v1/time/training",
     {"params": 70e9, "gpu": "h100-sxm"}, "flops"),
    (["flops", "matmul", "--m", "4", "--k", "4", "--n", "4", "--batch", "true"], "/api/v1/flops/matmul",
     {"m": 4, "k": 4, "n": 4, "batch": True}, "batch"),
    (["flops", "matmul", "--m", "4", "--k", "4"], "/api/v1/flops/matmul", {"m": 4, "k": 4}, "n"),
    (["fit", "--model", "llama3-8b", "--gpu", "rtx-4090", "--seq-len", "100000"], "/api/v1/fit",
     {"model": "llama3-8b", "gpu": "rtx-4090", "seq_len": 100000}, "seq_len"),
    (["fit", "--model", "llama3-8b", "--gpu", "rtx-4091"], "/api/v1/fit",
     {"model": "llama3-8b", "gpu": "rtx-4091"}, "gpu"),
    (["finetune", "--model", "llama3-8b", "--mode", "qlora", "--base-format", "fp9"], "/api/v1/finetune",
     {"model": "llama3-8b", "mode": "qlora", "base_format": "fp9"}, "base_format"),
]


@pytest.mark.parametrize(("argv", "path", "body", "field"), REFUSED, ids=[r[3] for r in REFUSED])
def test_calc_refuses_with_the_apis_message(capsys, api, argv, path, body, field):
    expected = api.post(path, body)
    assert expected.status_code == 422 and field in expected.json()["message"]
    status, out, err = run_main(capsys, "calc", *argv, "--compact")
    assert (status, out) == (2, "")
    assert err == expected.text + "\n"


def test_calc_unknown_path_item_is_the_apis_404(capsys, api):
    expected = api.get("/api/v1/hardware/h99")
    assert expected.status_code == 404
    status, out, err = run_main(capsys, "calc", "hardware", "get", "h99")
    assert (status, out) == (2, "") and json.loads(err) == expected.json()


def test_malformed_json_gets_the_apis_message(capsys, api):
    raw = '{"m": 4, "k": 4,'
    expected = api.request("POST", "/api/v1/flops/matmul", content=raw,
                           headers={"content-type": "application/json"})
    status, _, err = run_main(capsys, "calc", "flops", "matmul", "--json", raw, "--compact")
    assert status == 2 and err == expected.text + "\n" and "malformed JSON" in err


def test_json_body_from_text_file_or_stdin_with_options_on_top(capsys, tmp_path, monkeypatch):
    body = {"m": 4, "k": 3, "n": 2}
    answers = []
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(body)))
    for source in (json.dumps(body), f"@{path}", "-"):
        status, out, _ = run_main(capsys, "calc", "flops", "matmul", "--json", source, "--n", "8")
        assert status == 0
        answers.append(json.loads(out))
    assert all(a["flops"] == 2 * 4 * 3 * 8 and a["n"] == 8 for a in answers)
    status, _, err = run_main(capsys, "calc", "flops", "matmul", "--json", f"@{tmp_path / 'missing.json'}")
    assert status == 2 and "missing.json" in err


def test_values_are_read_leniently():
    assert options.value("70e9") == 70e9 and options.value("8192") == 8192 and options.value(".5") == 0.5
    assert options.value("true") is True and options.value("null") is None
    assert options.value("[1, 2]") == [1, 2] and options.value('{"a": 1}') == {"a": 1}
    assert options.value("gpt2") == "gpt2" and options.value('"0.1"') == "0.1"
    assert options.value("nan") == "nan" and options.value("inf") == "inf" and options.value("NaN") == "NaN"
    assert options.list_value("bfloat16,float32") == ["bfloat16", "float32"]
    assert options.list_value("256, 64") == [256, 64] and options.list_value("4096") == [4096]
    assert options.list_value("[[1]]") == [[1]]


def test_every_calculator_route_has_a_command(capsys):
    paths = create_app().openapi()["paths"]
    server_only = ("/api/v1/jobs", "/api/v1/device", "/api/v1/calibration", "/api/v1/accuracy",
                   "/api/v1/import")
    routes = {(method.upper(), path) for path, ops in paths.items() for method in ops
              if path.startswith("/api/v1/") and not path.startswith(server_only)}
    from app.cli.calc import calculators
    assert {(c.method, c.path) for c in calculators()} == routes
    _, out, _ = run_main(capsys, "calc", "--help")
    for calc in calculators():
        assert f"  {calc.command} " in out and calc.summary[:40] in " ".join(out.split())
    # The groups whose one route is their own path are commands without an ACTION.
    assert {c.command for c in calculators() if not c.action} == {"fit", "finetune", "checkpoint", "energy"}


class WidgetRequest(BaseModel):
    widgets: int = Field(3, ge=1, le=9, description="How many widgets.")


def _widgets(monkeypatch, path: str) -> APIRouter:
    """A route module the CLI has never seen, POST /widgets{path} doubling its body, added to
    the route table; the CLI's table read from it, as `python -m app.cli.calc` rewrites
    app/cli/calc_table.py."""
    router = APIRouter(prefix="/widgets")

    @router.post(path)
    async def count(body: WidgetRequest) -> dict:
        """Twice the widgets."""
        return {"twice": 2 * body.widgets}

    module = types.ModuleType("app.api.routes.widgets", "Widgets, for the test.")
    module.router = router
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(api_router, "MODULES", (*api_router.MODULES, module.__name__))
    from app.cli import calc
    monkeypatch.setattr(calc, "table", calc.calculators)
    return router


def test_a_new_calculator_gets_a_command_for_free(capsys, monkeypatch):
    _widgets(monkeypatch, "/count")
    _, out, _ = run_main(capsys, "calc", "--help")
    assert "widgets count" in out and "Twice the widgets." in out
    _, out, _ = run_main(capsys, "calc", "widgets", "count", "--help")
    assert "--widgets INT" in out
    assert "How many widgets. [integer in [1, 9]; default: 3]" in " ".join(out.split())
    assert run_main(capsys, "calc", "widgets", "count", "--widgets", "4", "--compact")[1] == '{"twice":8}\n'
    status, _, err = run_main(capsys, "calc", "widgets", "count", "--widgets", "10")
    assert status == 2 and json.loads(err)["message"] == "widgets: must be <= 9"


def test_a_group_with_one_unnamed_route_is_one_command(capsys, monkeypatch):
    """POST /widgets is `tally calc widgets`; once the group also has a named action, the
    unnamed one is `widgets post` beside it (argparse's ACTION cannot be optional)."""
    router = _widgets(monkeypatch, "")
    _, out, _ = run_main(capsys, "calc", "--help")
    assert re.search(r"^  widgets +Twice the widgets\.$", out, re.MULTILINE)
    _, out, _ = run_main(capsys, "calc", "widgets", "--help")
    assert "POST /api/v1/widgets" in out and "--widgets INT" in out
    assert run_main(capsys, "calc", "widgets", "--widgets", "4", "--compact")[1] == '{"twice":8}\n'
    assert run_main(capsys, "calc", "widgets", "post", "--widgets", "4")[0] == 2  # no such argument

    @router.post("/halve")
    async def halve(body: WidgetRequest) -> dict:
        """Half the widgets."""
        return {"half": body.widgets / 2}

    _, out, _ = run_main(capsys, "calc", "--help")
    assert "widgets halve" in out and "widgets post" in out
    assert run_main(capsys, "calc", "widgets", "post", "--widgets", "4", "--compact")[1] == '{"twice":8}\n'
    assert run_main(capsys, "calc", "widgets", "halve", "--widgets", "4", "--compact")[1] == '{"half":2.0}\n'


# --- help at every level --------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "names"), [
    ([], ["calc", "probe", "serve", "worker"]),
    (["calc"], ["flops transformer", "memory max-model", "time training", "dtypes encode", "hardware list",
                "fit Serving in the weight formats", "finetune Trainable and frozen parameters",
                "tally calc fit --model llama3-8b --gpu rtx-4090 --seq-len 2048"]),
    (["calc", "fit"], ["POST /api/v1/fit", "--model", "--gpu", "--num-gpus", "--seq-len", "--batch-size",
                       "--lora-rank", "--recompute", "one of none, selective, full", "rtx-4090"]),
    (["calc", "finetune"], ["POST /api/v1/finetune", "--mode", "--lora-targets", "--base-format"]),
    (["calc", "flops"], ["transformer", "matmul", "mlp"]),
    (["calc", "flops", "transformer"], ["--model", "--batch-size", "--seq-len", "--causal", "--json",
                                        "[1, 10000000]; default: 1024", "one of full, halved", "llama3-8b"]),
    (["calc", "time", "training"], ["--params", "--tokens", "--mfu", "--price-per-gpu-hour", "h100-sxm"]),
    (["calc", "hardware", "get"], ["GPU_ID", "tally calc hardware list"]),
    (["probe"], ["matmul", "bandwidth", "transfer", "train_step"]),
    (["probe", "matmul"], ["--sweep", "--shapes", "--dtypes", "--timeout", "--gpu", "--output", "--json"]),
    (["probe", "train_step"], ["--model", "--batch-size", "--optimizer", "--precision", "cruncher",
                               "[1, 65536]; default: 4", "--mode", "--lora-targets", "--freeze-layers",
                               "--base-format"]),
])
def test_help_at_every_level_names_the_fields(capsys, argv, names):
    status, out, _ = run_main(capsys, *argv, "--help")
    assert status == 0
    flat = " ".join(out.split())
    for name in names:
        assert name in flat, (name, out)


def test_top_level_help_does_not_load_the_calculators_or_the_probes():
    script = textwrap.dedent("""
        import sys
        from app.cli import main
        try:
            main(["--help"])
        except SystemExit:
            pass
        heavy = ("app.api.router", "app.probes.params", "rich", "pydantic")
        print(sorted(m for m in heavy if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_usage_errors_exit_2(capsys):
    assert run_main(capsys, "calc")[0] == 2
    assert run_main(capsys, "calc", "flops", "cube")[0] == 2
    assert run_main(capsys, "probe", "sleep")[0] == 2
    status, _, err = run_main(capsys, "probe", "matmul", "--json", "{oops")
    assert status == 2 and "malformed JSON" in err


# --- calc in a fresh process: no database, no torch -----------------------------------------------

def test_calc_creates_no_database_and_imports_no_torch(tmp_path):
    """Even `mfu: measured`, which reads the job database, answers as a server with an empty one."""
    measured = {"params": 7e9, "tokens": 1e12, "gpu": "h100-sxm", "mfu": "measured"}
    script = textwrap.dedent(f"""
        import sys
        from app.cli import main
        assert main(["calc", "flops", "transformer", "--model", "gpt2", "--compact"]) == 0
        assert main(["calc", "time", "training", "--json", {json.dumps(measured)!r}, "--compact"]) == 2
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy")))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TALLY_DATABASE_PATH": str(tmp_path / "tally.db")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert json.loads(result.stdout.splitlines()[0])["params"]["total"] == 124_439_808  # GPT-2 small
    assert list(tmp_path.iterdir()) == []
    fresh = Api(create_app(Settings(database_path=tmp_path / "fresh.db")))
    try:
        expected = fresh.post("/api/v1/time/training", measured)
    finally:
        fresh.close()
    assert expected.status_code == 422 and result.stderr == expected.text + "\n"


# --- probe: refusals are the API's ----------------------------------------------------------------

@pytest.mark.parametrize(("argv", "body", "field"), [
    (["train_step", "--batch-size", "0"], {"probe": "train_step", "params": {"batch_size": 0}},
     "params.batch_size"),
    (["train_step", "--model", "llama3.1-405b", "--seq-len", "128"],
     {"probe": "train_step", "params": {"model": "llama3.1-405b", "seq_len": 128}}, "params.batch_size"),
    (["train_step", "--model", '{"kind": "cruncher", "dim": 0}'],
     {"probe": "train_step", "params": {"model": {"kind": "cruncher", "dim": 0}}}, "params.model.dim"),
    (["matmul", "--sweep", "custom"], {"probe": "matmul", "params": {"sweep": "custom"}}, "params.shapes"),
    (["bandwidth", "--timeout", "90000"], {"probe": "bandwidth", "timeout_s": 90000}, "timeout_s"),
    (["bandwidth", "--gpu", "first"], {"probe": "bandwidth", "gpu": "first"}, "gpu"),
    (["collectives", "--device", "cpu", "--ranks", "9"],
     {"probe": "collectives", "params": {"device": "cpu", "ranks": 9}}, "params.ranks"),
], ids=["bound", "admission", "nested", "rule", "timeout", "gpu", "cpu-ranks"])
def test_probe_refuses_with_the_jobs_apis_message(capsys, tmp_path, argv, body, field):
    fresh = Api(create_app(Settings(database_path=tmp_path / "jobs.db")))
    try:
        expected = fresh.post("/api/v1/jobs", body)
    finally:
        fresh.close()
    assert expected.status_code == 422 and expected.json()["message"].startswith(field)
    status, out, err = run_main(capsys, "probe", *argv)
    assert (status, out) == (2, "")
    assert json.loads(err) == expected.json()


def test_probe_reports_how_the_job_ended_and_runs_on_the_gpu_named(capsys, monkeypatch, tmp_path):
    """A stand-in dispatcher ends the job at once, as a child out of GPU memory would; the
    settings serve two GPUs (on this GPU-less box admission then sizes the job for the host)."""
    ran_on = []

    class OutOfMemory:
        def __init__(self, store, worker_id, gpu=None, **_):
            self.store, self.worker_id, self.gpu = store, worker_id, gpu

        def start(self):
            job = self.store.claim(worker_id=self.worker_id, gpu=self.gpu)
            ran_on.append(job.ran_on_gpu)
            self.store.finish(job.id, status="oom", error=OOM)

        def stop(self):
            return True

    monkeypatch.setattr("app.jobs.dispatcher.Dispatcher", OutOfMemory)
    two_gpus = Settings(gpus=[0, 1], database_path=tmp_path / "unused.db")
    monkeypatch.setattr("app.config.get_settings", lambda: two_gpus)
    status, out, err = run_main(capsys, "probe", "bandwidth", "--gpu", "1", "--output", "json")
    assert status == 1 and "tally probe: oom: OutOfMemoryError: CUDA out of memory" in err
    assert json.loads(out) == {"status": "oom", "error": OOM}
    assert run_main(capsys, "probe", "bandwidth")[0] == 1
    assert ran_on == [1, 0]  # the GPU named, then the first served
    status, _, err = run_main(capsys, "probe", "bandwidth", "--gpu", "2")
    assert status == 2 and json.loads(err)["message"].startswith("gpu: GPU 2 is not served here")


OOM = {"type": "OutOfMemoryError", "message": "CUDA out of memory", "detail": {"free_bytes": 0}}


# --- probe: real runs on the CPU ------------------------------------------------------------------

@pytest.mark.slow  # a real probe in a child, through `tally probe`
def test_matmul_probe_prints_a_table_of_its_shapes():
    result = tally("probe", "matmul", "--sweep", "custom", "--shapes", json.dumps(SHAPES),
                   "--dtypes", "float32,bfloat16", *FAST)
    assert result.returncode == 0, result.stderr
    for shape in ("48x32x16", "64x16x8"):
        assert result.stdout.count(shape) == 2  # one row per dtype
    for header in ("m x k x n", "dtype", "FLOPs", "median ms", "TFLOP/s (median)", "TFLOP/s (best iteration)",
                   "MFU (median)"):
        assert header in result.stdout
    assert f"{2 * 48 * 32 * 16:,}" in result.stdout
    # Not a terminal: no progress frames, only the one line saying what runs.
    assert "\r" not in result.stderr and result.stderr.strip() == "matmul on cpu, time limit 600 s"


@pytest.mark.slow  # a real probe in a child, through `tally probe`
def test_collectives_probe_prints_each_point_and_the_fits():
    """Two gloo ranks started by the probe's child: a row per collective and size, values checked."""
    result = tally("probe", "collectives", "--device", "cpu", "--collectives", "all_reduce,broadcast",
                   "--sizes-bytes", "1024,65536", "--iterations", "2", "--warmup-iterations", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for op in ("all_reduce", "broadcast"):
        for size in ("1,024", "65,536"):
            assert any(op in line and size in line for line in lines), (op, size)
    assert result.stdout.count("all_reduce") == 3 and result.stdout.count("broadcast") == 3  # 2 points, 1 fit
    assert "2 ranks over gloo, float32" in result.stdout and "values: all correct" in result.stdout


@pytest.mark.slow  # a real probe in a child, through `tally probe`
def test_matmul_probe_json_has_2mkn_flops_per_shape():
    result = tally("probe", "matmul", "--sweep", "custom", "--shapes", json.dumps(SHAPES),
                   "--dtypes", "float32", "--output", "json", *FAST)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["probe"] == "matmul" and answer["environment"]["device"] == "cpu"
    assert [(p["m"], p["k"], p["n"]) for p in answer["points"]] == [(s["m"], s["k"], s["n"]) for s in SHAPES]
    for p in answer["points"]:
        assert p["flops"] == 2 * p["m"] * p["k"] * p["n"] and p["dtype"] == "float32"
        assert p["flop_per_sec"] == pytest.approx(p["flops"] / p["time"]["median"])


@pytest.mark.slow  # a real probe in a child, through `tally probe`
def test_train_step_probe_json_and_its_table():
    result = tally("probe", "train_step", "--model", '{"kind": "cruncher", "dim": 32, "num_layers": 2}',
                   "--batch-size", "2", "--seq-len", "4", "--steps", "1", "--warmup-steps", "1",
                   "--output", "json", *FAST)
    assert result.returncode == 0, result.stderr
    r = json.loads(result.stdout)
    # Two 32x32 layers and a 32 -> 1 head, no biases; 2 x 4 tokens.
    assert r["params"] == 2 * 32 * 32 + 32 and r["tokens_per_step"] == 8
    assert r["flops_per_step_6nd"] == 6 * r["params"] * 8
    text = render(r)
    mem = r["memory"]
    # The figures of the JSON, as every table writes numbers (app/numbers.py: three significant figures).
    for needle in ("forward", "backward", "optimizer step", "tokens/s", f"{r['flops_per_step']:,}",
                   "peak (total)", sig(mem["predicted"]["total"] / 1024),
                   sig(mem["measured_peak_allocated"] / 1024),
                   percent(mem["predicted"]["total"] / mem["measured_peak_allocated"] - 1, 1, True),
                   "predicted KiB", "measured KiB", "error"):
        assert needle in text, needle


def render(result: dict) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    for part in printed(RESULTS.validate_python(result)):
        console.print(part)
    return console.export_text()


# Runs for a minute unless stopped.
LONG = ["probe", "matmul", "--sweep", "custom", "--shapes", '[{"m": 256, "k": 256, "n": 256}]',
        "--dtypes", "float32", "--measure-s", "60", "--min-iters", "10000", "--max-iters", "100000"]


@pytest.mark.slow  # a real probe in a child, through `tally probe`
def test_a_probe_past_its_time_limit_is_stopped():
    result = tally(*LONG, "--timeout", "1")
    assert result.returncode == 1 and result.stdout == ""
    assert "tally probe: timeout: Timeout: the job exceeded its time limit of 1 s" in result.stderr


@pytest.mark.slow  # a real probe in a child, through `tally probe`
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads child pids from /proc")
def test_ctrl_c_stops_the_probe_and_its_child(tmp_path):
    # TMPDIR: the probe's private job store is then under tmp_path, where the test can read it.
    # PYTHONFAULTHANDLER: a CLI still running 30 s after Ctrl-C is sent SIGABRT, and every thread's
    # stack is in the failure. SIGINT as a terminal's shell leaves it: a suite started in the
    # background by a shell without job control ignores SIGINT, and a child inherits that (it did).
    cli = subprocess.Popen([*TALLY, *LONG], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONFAULTHANDLER": "1"},
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        kids = wait_for(lambda: children(cli.pid), timeout=30, what="the probe's child to start", every=0.05)
        wait_for(lambda: measuring(tmp_path), what="the probe to report progress", every=0.05)
        cli.send_signal(signal.SIGINT)
        try:
            out, err = cli.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            cli.send_signal(signal.SIGABRT)
            out, err = cli.communicate(timeout=30)
            pytest.fail(f"tally probe still ran 30 s after SIGINT; its stacks:\n{err}")
    finally:
        cli.kill()
    assert cli.returncode == 130 and out == "" and "interrupted" in err
    for pid in kids:
        assert not Path(f"/proc/{pid}").exists() or state(pid) == "Z", f"child {pid} outlived the CLI"


def measuring(tmp: Path) -> bool:
    """Whether the `tally probe` whose temporary directory is in `tmp` runs a job that has reported
    progress: its child is past start-up and measuring, and the CLI is following the row."""
    for database in tmp.glob("tally-probe-*/jobs.db"):
        running = Store(database).page(status="running")[0]
        return bool(running) and running[0].progress_total > 0
    return False


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_group_without_a_module_of_its_own_has_its_own_description(capsys):
    """Issue 28, point 13: quantization's routes live in the inference module, and its group once
    borrowed the inference group's description."""
    _, quantization, _ = run_main(capsys, "calc", "quantization", "--help")
    _, inference, _ = run_main(capsys, "calc", "inference", "--help")
    assert "Every weight format" in quantization and "Serving:" not in quantization
    assert "Serving:" in inference
