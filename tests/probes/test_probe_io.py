"""The checkpoint and data_loader probes on the CPU: a torch.save file's size against the memory
engine's checkpoint_bytes (counted by hand here), and the course's get_batch against a train step."""

import shutil

import numpy as np
import pytest
import torch

from app.bench import checkpoint, data_loader
from app.probes import scratch
from app.probes.data_loader import MAX_FILE_BYTES
from app.probes.registry import PROBES, RESULTS
from tests.support.api import assert_names_field

QUICK = {"device": "cpu", "warmup_s": 0.01, "measure_s": 0.02, "min_iters": 3, "max_iters": 10}
CRUNCHER = {"kind": "cruncher", "dim": 256, "num_layers": 2}
# A GPT-2-style model, small: learned positions, LayerNorm and GELU MLP with biases, tied head.
GPT = {"vocab_size": 2048, "d_model": 128, "n_layers": 2, "n_heads": 4, "mlp": "gelu", "norm": "layernorm",
       "position": "learned", "max_seq_len": 256, "tied_embeddings": True}


def gpt_params(vocab: int, d: int, layers: int, positions: int) -> int:
    """GPT-2's count: token and position tables (the head tied to the first), per layer the QKV and
    output projections with biases, a 4d MLP with biases and two LayerNorms (weight and bias), and
    the final LayerNorm."""
    per_layer = (3 * d * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d
    return vocab * d + positions * d + layers * per_layer + 2 * d


# Parameters: the cruncher's two 256 x 256 layers and its 256 -> 1 head, no biases.
PARAMS = {"cruncher": 2 * 256 * 256 + 256, "custom": gpt_params(2048, 128, 2, 256)}
# Parameter tensors: the cruncher's three matrices; GPT's two tables, 12 per layer (QKV, output, MLP in
# and out, each weight and bias; two LayerNorms' weight and bias), the final LayerNorm's two.
TENSORS = {"cruncher": 3, "custom": 2 + 2 * 12 + 2}
# fp32 state per parameter in torch's optimizers: SGD without momentum keeps none, Adagrad its
# `sum`, Adam and AdamW exp_avg and exp_avg_sq (torch.optim's documented state), 4 bytes each.
STATE_BYTES = {"sgd": 0, "adagrad": 4, "adam": 8, "adamw": 8}


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam", "adamw"])
@pytest.mark.parametrize("model", [CRUNCHER, GPT], ids=["cruncher", "gpt"])
def test_the_checkpoint_file_is_the_predicted_bytes_within_one_percent(model, optimizer):
    raw = QUICK | {"model": model, "optimizer": optimizer, "batch_size": 2, "seq_len": 16, "repeats": 2}
    r = RESULTS.validate_python(checkpoint.run(raw, lambda *_: None))
    n = PARAMS[r.model]
    assert r.params == n
    by_hand = n * (4 + STATE_BYTES[optimizer])  # fp32 weights and state
    assert r.predicted_bytes == by_hand
    assert r.file_bytes == pytest.approx(by_hand, rel=0.01)
    assert abs(r.relative_error) < 0.01 and r.relative_error == r.predicted_bytes / r.file_bytes - 1
    # The file holds every tensor, and the framing is the rest, step counters included.
    assert r.tensor_bytes["model"] == 4 * n
    assert r.tensor_bytes["optimizer_state"] == n * STATE_BYTES[optimizer]
    assert r.overhead_bytes == r.file_bytes - 4 * n - n * STATE_BYTES[optimizer] > 0
    # Adam's and Adagrad's `step`, a 0-d float32 per parameter tensor; SGD keeps none.
    assert r.tensor_bytes["step_counters"] == (0 if optimizer == "sgd" else 4 * TENSORS[r.model])
    assert r.write_s.iterations == r.read_s.iterations == 2
    assert r.write_bytes_per_s == pytest.approx(r.file_bytes / r.write_s.median)
    assert r.read_bytes_per_s == pytest.approx(r.file_bytes / r.read_s.median)
    assert r.read_cache == "dropped"  # Linux has posix_fadvise


def test_checkpoint_in_bf16_keeps_bf16_state():
    """bf16: weights and Adam's moments in 2 bytes each (6 bytes per parameter), the engine's rule."""
    raw = QUICK | {"model": GPT, "optimizer": "adamw", "precision": "bf16", "batch_size": 2, "seq_len": 16}
    r = RESULTS.validate_python(checkpoint.run(raw, lambda *_: None))
    assert r.predicted_bytes == PARAMS["custom"] * 6
    assert abs(r.relative_error) < 0.01


def test_the_checkpoints_speeds_are_top_level_floats_another_calculator_reads():
    out = checkpoint.run(QUICK | {"model": CRUNCHER, "optimizer": "sgd", "repeats": 1}, lambda *_: None)
    assert isinstance(out["write_bytes_per_s"], float) and isinstance(out["read_bytes_per_s"], float)
    assert out["write_bytes_per_s"] > 0 and out["read_bytes_per_s"] > 0


def test_get_batch_draws_the_courses_shifted_pairs(tmp_path):
    path = tmp_path / "tokens.uint16"
    np.arange(5000, dtype=np.uint16).tofile(path)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    x, y = data_loader.get_batch(data, 6, 32, torch.device("cpu"), pinned=False)
    assert x.shape == y.shape == (6, 32) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # y is x one token on, as the ids here count up
    assert torch.equal(x[:, 1:], x[:, :-1] + 1) and int(y.max()) <= 4999


def test_the_loader_against_a_given_train_rate():
    raw = QUICK | {"model": CRUNCHER, "batch_size": 8, "seq_len": 64, "file_bytes": 2**20,
                   "token_dtype": "uint32", "train_tokens_per_s": 1000.0}
    r = RESULTS.validate_python(data_loader.run(raw, lambda *_: None))
    assert r.file_bytes == 2**20 and r.tokens_in_file == 2**20 // 4
    assert r.tokens_per_batch == 8 * 64 and r.batch_bytes == 2 * 8 * 64 * 8  # x and y, int64
    assert r.train_source == "params" and r.train_tokens_per_s == 1000.0
    assert [m.mode for m in r.modes] == ["pageable"] and r.skipped[0].what == "pinned"
    m = r.modes[0]
    assert m.tokens_per_sec == pytest.approx(8 * 64 / m.time.median)
    assert m.batches_per_sec == pytest.approx(1 / m.time.median)
    assert m.headroom == pytest.approx(m.tokens_per_sec / 1000.0) and m.keeps_up == (m.headroom >= 1)


def test_the_loader_times_the_train_step_itself_when_no_rate_is_given():
    raw = QUICK | {"model": {"kind": "cruncher", "dim": 64, "num_layers": 1}, "batch_size": 4, "seq_len": 32,
                   "file_bytes": 2**20, "steps": 2, "warmup_steps": 1}
    r = RESULTS.validate_python(data_loader.run(raw, lambda *_: None))
    assert r.train_source == "measured" and r.train_model == "cruncher" and r.train_tokens_per_s > 0
    assert r.modes[0].headroom == pytest.approx(r.modes[0].tokens_per_sec / r.train_tokens_per_s)


@pytest.mark.parametrize(("probe", "params", "field"), [
    ("data_loader", {"file_bytes": 0}, "params.file_bytes"),
    ("data_loader", {"file_bytes": ""}, "params.file_bytes"),
    ("data_loader", {"file_bytes": MAX_FILE_BYTES + 1}, "params.file_bytes"),
    ("data_loader", {"file_bytes": 2**20, "seq_len": 2**19, "train_tokens_per_s": 1e3}, "params.file_bytes"),
    ("data_loader", {"token_dtype": "int8"}, "params.token_dtype"),
    ("data_loader", {"train_tokens_per_s": 0}, "params.train_tokens_per_s"),
    ("data_loader", {"mode": "lora", "model": "gpt2"}, "params.mode"),
    ("checkpoint", {"mode": "lora", "model": "gpt2"}, "params.mode"),
    ("checkpoint", {"directory": "/etc"}, "params.directory"),
    ("checkpoint", {"repeats": 0}, "params.repeats"),
    ("checkpoint", {"optimizer": "lion"}, "params.optimizer"),
])
def test_bad_parameters_are_refused_by_name(make_api, probe, params, field):
    response = make_api().post("/api/v1/jobs", {"probe": probe, "params": {"device": "cpu"} | params})
    assert_names_field(response, field)


def test_a_file_the_scratch_disk_cannot_hold_is_refused_by_name(make_api):
    with pytest.raises(Exception, match="params.file_bytes: the job writes a file of about 1 GiB"):
        scratch.check(2**30, "params.file_bytes", free=2**30)
    scratch.check(2**30, "params.file_bytes", free=2 * 2**30)  # fits, with the spare left
    # Through the API: more than the disk holds (or, on a larger disk, more than the bound).
    too_big = min(shutil.disk_usage(scratch.directory()).free + 2**30, MAX_FILE_BYTES + 1)
    response = make_api().post("/api/v1/jobs", {"probe": "data_loader",
                                                "params": {"device": "cpu", "file_bytes": too_big}})
    assert_names_field(response, "params.file_bytes")


def test_each_probe_states_its_scratch_file():
    loader, ckpt = PROBES["data_loader"], PROBES["checkpoint"]
    assert loader.scratch(loader.params(), "cuda") == (256 * 2**20, "params.file_bytes")
    assert loader.scratch(loader.params(), "cpu") == (64 * 2**20, "params.file_bytes")
    cruncher = ckpt.params.model_validate({"model": CRUNCHER, "optimizer": "adam"})
    assert ckpt.scratch(cruncher, "cpu")[0] >= PARAMS["cruncher"] * 12


def test_tally_probe_prints_both_tables_through_the_child(tmp_path):
    from tests.support.cli import tally

    quick = ("--device", "cpu", "--warmup-s", "0.01", "--measure-s", "0.02", "--max-iters", "10")
    done = tally("probe", "data_loader", "--model", '{"kind": "cruncher", "dim": 64, "num_layers": 1}',
                 "--batch-size", "4", "--seq-len", "64", "--file-bytes", "2MiB",
                 "--train-tokens-per-s", "5000", *quick, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "2 MiB of uint16 tokens (1,048,576)" in out and "batch 4 x seq 64 (256 tokens" in out
    assert "pageable" in out and "train step (params)" in out and "5,000" in out
    assert "skipped pinned" in out and "x = data[i:i+seq_len]" in out  # prose printed as written
    done = tally("probe", "checkpoint", "--model", '{"kind": "cruncher", "dim": 256, "num_layers": 2}',
                 "--optimizer", "adam", "--repeats", "1", *quick, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    by_hand = (2 * 256 * 256 + 256) * 12  # fp32 weights, exp_avg and exp_avg_sq
    assert f"{by_hand:,}" in out and "write (torch.save, flush, fsync)" in out and "GB/s (median)" in out


def test_the_job_pages_show_the_headline_figures_and_charts(make_api):
    from app.numbers import sig
    from tests.support.bench_jobs import finished
    from tests.support.html import chart, element

    api = make_api()
    store = api.app.state.store
    raw = QUICK | {"model": CRUNCHER, "batch_size": 4, "seq_len": 32, "file_bytes": 2**20,
                   "train_tokens_per_s": 2e3}
    loader = RESULTS.validate_python(data_loader.run(raw, lambda *_: None))
    page = api.get(f"/benchmarks/jobs/{finished(store, loader)}").text
    m = loader.modes[0]
    headroom = element(page, "metric-pageable/headroom")
    assert headroom.startswith(f"{sig(m.headroom)}× headroom over the train step")
    assert element(page, "metric-train") == "2,000 tokens/s train step tokens/s, given (cruncher)"
    tokens = chart(page)
    assert tokens["type"] == "bars" and tokens["labels"] == ["get_batch, pageable", "train step (params)"]
    assert tokens["sets"][0]["data"] == [m.tokens_per_sec, None] and tokens["sets"][1]["data"] == [None, 2e3]
    assert "given in the parameters" in element(page, "loader-summary")

    raw = QUICK | {"model": CRUNCHER, "optimizer": "adamw", "repeats": 1}
    ckpt = RESULTS.validate_python(checkpoint.run(raw, lambda *_: None))
    page = api.get(f"/benchmarks/jobs/{finished(store, ckpt)}").text
    assert element(page, "metric-write").endswith("GB/s write, median (save, flush, fsync)")
    assert "checkpoint bytes, predicted vs file" in element(page, "metric-bytes")
    parts = chart(page, 0)
    assert parts["labels"] == ["predicted (checkpoint_bytes)", "measured (the file)"]
    # MB of 10^6 bytes: the predicted stack is 12 bytes per parameter, the measured one the whole file.
    assert sum(s["data"][0] for s in parts["sets"]) == pytest.approx(PARAMS["cruncher"] * 12 / 1e6)
    assert sum(s["data"][1] for s in parts["sets"]) == pytest.approx(ckpt.file_bytes / 1e6)
    speed = chart(page, 1)
    assert speed["sets"][0]["data"][0] == pytest.approx(ckpt.write_bytes_per_s / 1e9)
    csv = api.get(f"/api/v1/jobs/{finished(store, loader)}/result?format=csv").text.splitlines()
    assert len(csv) == 2 and "mode" in csv[0].split(",") and ",pageable," in csv[1]


def test_a_loader_job_takes_the_train_rate_of_this_servers_matching_run(make_api):
    """Through the real dispatcher and child: a train_step run, then a data_loader job of the same
    model, precision, optimizer, batch_size and seq_len submitted without a rate takes that run's."""
    from app.jobs.dispatcher import Dispatcher

    api = make_api()
    dispatcher = Dispatcher(api.app.state.store, "tests")
    step = {"device": "cpu", "model": {"kind": "cruncher", "dim": 64, "num_layers": 1}, "batch_size": 4,
            "seq_len": 32, "optimizer": "sgd", "steps": 2, "warmup_steps": 1}
    train = api.post("/api/v1/jobs", {"probe": "train_step", "params": step}).json()
    while dispatcher.run_once():
        pass
    rate = api.get(f"/api/v1/jobs/{train['id']}").json()["result"]["tokens_per_sec"]
    quick = step | QUICK | {"file_bytes": 2**20}
    loader = api.post("/api/v1/jobs", {"probe": "data_loader", "params": quick})
    assert loader.status_code == 202, loader.text
    params = loader.json()["params"]
    assert params["train_job_id"] == train["id"] and params["train_tokens_per_s"] == rate
    while dispatcher.run_once():
        pass
    result = api.get(f"/api/v1/jobs/{loader.json()['id']}").json()["result"]
    assert result["train_source"] == "calibration" and result["train_job_id"] == train["id"]
    assert result["train_tokens_per_s"] == rate
    assert result["modes"][0]["headroom"] == pytest.approx(result["modes"][0]["tokens_per_sec"] / rate)
    # Another batch size matches no run: the child will time the step itself.
    other = api.post("/api/v1/jobs", {"probe": "data_loader", "params": step | {"batch_size": 8}}).json()
    assert other["params"]["train_job_id"] is None and other["params"]["train_tokens_per_s"] is None
    # Naming a run that is not this configuration's is refused by name.
    named = api.post("/api/v1/jobs", {"probe": "data_loader",
                                      "params": step | {"batch_size": 8, "train_job_id": train["id"]}})
    assert_names_field(named, "params.train_job_id")


@pytest.mark.parametrize(("probe", "extra", "given"), [
    ("data_loader", {"file_bytes": "8MiB", "token_dtype": "int32"},
     {"file_bytes": 8 * 2**20, "token_dtype": "int32"}),
    ("data_loader", {"file_bytes": "", "token_dtype": "uint16"}, {"file_bytes": None}),
    ("checkpoint", {"file_bytes": "8MiB"}, {"optimizer": "adam"}),  # data_loader's field, not sent
])
def test_the_launch_form_submits_the_train_steps_fields_with_each_probe(make_api, probe, extra, given):
    from urllib.parse import urlencode

    api = make_api()
    form = {"probe": probe, "device": "cpu", "model": "cruncher", "dim": "128", "num_layers": "2",
            "batch_size": "2", "seq_len": "64", "optimizer": "adam", "precision": "fp32"} | extra
    response = api.post("/ui/benchmarks/launch", content=urlencode(form),
                        headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200 and "HX-Trigger" in response.headers, response.text
    [job] = api.get("/api/v1/jobs").json()["data"]
    assert job["probe"] == probe
    assert job["params"]["model"] == {"kind": "cruncher", "dim": 128, "num_layers": 2}
    assert {k: job["params"][k] for k in given} == given and job["params"]["batch_size"] == 2
    assert ("file_bytes" in job["params"]) == (probe == "data_loader")


@pytest.mark.parametrize("probe", ["data_loader", "checkpoint", "train_step"])
def test_a_sequence_past_gpt2s_positions_is_refused_under_params(make_api, probe):
    """GPT-2 has 1,024 learned positions (its model card's n_positions)."""
    params = {"device": "cpu", "model": "gpt2", "seq_len": 2048, "batch_size": 1}
    response = make_api().post("/api/v1/jobs", {"probe": probe, "params": params})
    assert_names_field(response, "params.seq_len")


def test_the_checkpoint_calculators_measured_disk_is_this_servers_checkpoint_run(make_api):
    """Through the real dispatcher and child: a checkpoint job, then POST /api/v1/checkpoint with
    "measured" rates times a GPT-2 checkpoint at exactly that job's write and read rates, and
    names the job."""
    from app.jobs.dispatcher import Dispatcher

    api = make_api()
    dispatcher = Dispatcher(api.app.state.store, "tests")
    job = api.post("/api/v1/jobs", {"probe": "checkpoint", "params": {
        "device": "cpu", "model": {"kind": "cruncher", "dim": 64, "num_layers": 1}, "optimizer": "adamw",
        "repeats": 2}}).json()
    while dispatcher.run_once():
        pass
    result = api.get(f"/api/v1/jobs/{job['id']}").json()["result"]
    answer = api.post("/api/v1/checkpoint", {"model": "gpt2", "write_bytes_per_s": "measured",
                                            "read_bytes_per_s": "measured"})
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["write_bytes_per_s"] == result["write_bytes_per_s"]
    assert plan["read_bytes_per_s"] == result["read_bytes_per_s"]
    assert str(job["id"]) in plan["write_source"] and str(job["id"]) in plan["read_source"]
    assert plan["write_seconds"] == pytest.approx(plan["checkpoint_bytes"] / result["write_bytes_per_s"])
    assert plan["read_seconds"] == pytest.approx(plan["checkpoint_bytes"] / result["read_bytes_per_s"])


def test_the_dataset_calculators_measured_loader_is_this_servers_data_loader_run(make_api):
    """Before any data_loader run, "measured" is refused naming loader_tokens_per_s; after one
    through the real dispatcher and child, 8 loaders at that run's fastest mode's tokens/s over a
    run of 1e6 tokens/s have a headroom of 8 x rate / 1e6."""
    from app.jobs.dispatcher import Dispatcher

    api = make_api()
    body = {"tokens": "1B", "vocab_size": 50257, "tokens_per_s": 1e6, "seq_len": 64,
            "loader_tokens_per_s": "measured", "num_loaders": 8}
    refused = assert_names_field(api.post("/api/v1/data/dataset", body), "loader_tokens_per_s")
    assert "data_loader" in refused["message"]
    dispatcher = Dispatcher(api.app.state.store, "tests")
    job = api.post("/api/v1/jobs", {"probe": "data_loader", "params": QUICK | {
        "file_bytes": 2**20, "batch_size": 2, "seq_len": 64, "train_tokens_per_s": 1000}}).json()
    while dispatcher.run_once():
        pass
    modes = api.get(f"/api/v1/jobs/{job['id']}").json()["result"]["modes"]
    rate = max(m["tokens_per_sec"] for m in modes)
    answer = api.post("/api/v1/data/dataset", body)
    assert answer.status_code == 200, answer.text
    loader = answer.json()["loader"]
    assert loader["loader_tokens_per_s"] == rate and f"data_loader job {job['id']}" in loader["loader_source"]
    assert loader["loader_headroom"] == pytest.approx(8 * rate / 1e6)
    page = api.get("/ui/data", params={k: str(v) for k, v in body.items()}).text
    assert 'data-testid="loader-headroom"' in page and f"data_loader job {job['id']}" in page
