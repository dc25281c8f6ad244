"""POST /api/v1/inference/time with `calibration`: the H200 profile built from the recorded runs of
the H200 lent once (docs/measurements/profile-h200.json, bench/profile_from_results.py) gives the
efficiencies the request leaves out and the host's seconds per eager op, each line naming its jobs."""

import json

import pytest

from app.accounting import hardware
from tests.support import ROOT
from app.probes import campaign
from tests.support.api import assert_names_field

H200 = json.loads((ROOT / "docs" / "measurements" / "profile-h200.json").read_text())
ASK = {"model": "llama3.2-1b", "gpu": "h200", "engine": "transformers", "concurrency": 8, "prompt_tokens": 512,
       "output_tokens": 128}


@pytest.fixture
def api(make_api):
    api = make_api()
    imported = api.post("/api/v1/calibration/import", H200)
    assert imported.status_code == 201, imported.text
    return api


def test_the_profile_sets_the_efficiencies_left_out_and_names_its_jobs(api):
    plain = api.ok("/api/v1/inference/time", ASK)
    calibrated = api.ok("/api/v1/inference/time", ASK | {"calibration": "NVIDIA H200"})
    acc = hardware.gpu("h200")
    copy = H200["copy_bytes_per_s"]
    assert calibrated["memory_efficiency"] == pytest.approx(copy["value"] / acc.memory_bandwidth_bytes_per_sec)
    assert plain["memory_efficiency"] == 0.9 and plain["calibration"] == []
    assert calibrated["flops_efficiency"] != plain["flops_efficiency"]
    assert calibrated["memory_efficiency_source"].startswith("calibrated: the copy bandwidth of profile 1")
    assert f"bandwidth jobs {', '.join(map(str, copy['jobs']))}" in calibrated["memory_efficiency_source"]
    eager = H200["launch_eager_s"]
    assert f"{eager['value'] * 1e6:.3g} us an op" in calibrated["calibration"][0]
    assert set(H200["flags"]) <= set(calibrated["calibration"])
    # transformers launches eagerly: the host's share of a decode step is ops x the profile's figure.
    host = calibrated["decode_kernels"]["host_seconds"]
    assert host == pytest.approx(calibrated["decode_kernels"]["kernels"] * eager["value"])


def test_given_efficiencies_stay_and_a_profile_of_another_gpu_is_refused(api):
    given = api.ok("/api/v1/inference/time", ASK | {"calibration": 1, "memory_efficiency": 0.5,
                                                    "flops_efficiency": 0.6})
    assert (given["memory_efficiency"], given["flops_efficiency"]) == (0.5, 0.6)
    assert_names_field(api.post("/api/v1/inference/time", ASK | {"gpu": "h100-sxm", "calibration": 1}),
                       "calibration")
    assert_names_field(api.post("/api/v1/inference/time", ASK | {"calibration": 2}), "calibration")


def test_a_collective_runs_over_the_link_a_profile_fitted_to_its_collectives_runs(make_api):
    from app.accounting.comm.collectives import FittedLink, fit_link
    from tests.calibration.test_profiles import store_matmul
    from tests.support.bench_jobs import finished, here
    from tests.support.results import result_for

    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    # nccl-tests' all_reduce over 2 ranks at 5 us a step and 20 GB/s of bus bandwidth, exactly.
    sizes = [4096, 65536, 1 << 20, 1 << 24]
    truth = FittedLink("all_reduce", 2, 2, 5e-6, 20e9, 4, 0.0)
    fit = fit_link("all_reduce", 2, sizes, [truth.seconds(s) for s in sizes])
    job = finished(store, result_for("collectives", environment=here(), ranks=2, fits=[fit]))
    profile = api.post("/api/v1/calibration/profiles").json()
    assert profile["collectives"][0]["jobs"] == [job]
    ask = {"collective": "all_reduce", "bytes": 1 << 22, "ranks": 2, "calibration": profile["id"]}
    answer = api.ok("/api/v1/comm/collective", ask)
    assert answer["seconds"] == pytest.approx(truth.seconds(1 << 22), rel=1e-6)
    assert f"collectives jobs {job}" in answer["assumptions"][0]
    # all_gather has no runs of its own: all_reduce's link, said so.
    gathered = api.ok("/api/v1/comm/collective", ask | {"collective": "all_gather"})
    assert "its all_reduce runs" in gathered["assumptions"][0]
    assert_names_field(api.post("/api/v1/comm/collective", ask | {"gpu": "h100-sxm"}), "calibration")


def test_checkpoint_and_data_loader_rates_come_from_the_profile_when_left_out(make_api):
    from app.probes.data_loader import LoaderMode
    from tests.calibration.test_profiles import store_matmul
    from tests.support.bench_jobs import finished, here
    from tests.support.results import minimal, result_for

    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    disk = finished(store, result_for("checkpoint", environment=here(), write_bytes_per_s=1.5e9,
                                      read_bytes_per_s=3e9))
    modes = [minimal(LoaderMode, mode="pageable", tokens_per_sec=2e6), minimal(LoaderMode, mode="pinned",
                                                                            tokens_per_sec=5e6)]
    loader = finished(store, result_for("data_loader", environment=here(), modes=modes))
    profile = api.post("/api/v1/calibration/profiles").json()
    saved = api.ok("/api/v1/checkpoint", {"model": "gpt2", "calibration": profile["id"]})
    assert (saved["write_bytes_per_s"], saved["read_bytes_per_s"]) == (1.5e9, 3e9)
    assert f"checkpoint jobs {disk}" in saved["write_source"]
    given = api.ok("/api/v1/checkpoint", {"model": "gpt2", "calibration": profile["id"], "read_bytes_per_s": 1e9})
    assert (given["read_bytes_per_s"], given["read_source"]) == (1e9, "given")
    assert_names_field(api.post("/api/v1/checkpoint", {"model": "gpt2"}), "write_bytes_per_s")
    data = api.ok("/api/v1/data/dataset", {"tokens": "1B", "vocab_size": 50257, "tokens_per_s": 1e6, "seq_len": 1024,
                                             "calibration": profile["id"]})
    feed = data["loader"]
    assert feed["loader_tokens_per_s"] == 5e6 and f"data_loader jobs {loader}" in feed["loader_source"]


def test_a_training_plan_times_its_gemms_on_the_profiles_surface(api):
    ask = {"model": "llama3-8b", "gpu": "h200", "num_gpus": 8, "global_batch_sequences": 64, "seq_len": 4096,
           "top_k": 1}
    fast = api.ok("/api/v1/plan/training", ask | {"calibration": 1})
    jobs = sorted({j for s in H200["matmul"] for j in s["jobs"]})
    assert fast["assumptions"][0].startswith("calibrated: every bfloat16 GEMM timed on the matmul surface of "
                                             f"profile 1 (NVIDIA H200, version 1) (matmul jobs {', '.join(map(str, jobs))})")
    # The same device measured twice as slow at every shape: each GEMM takes twice as long.
    slow = H200 | {"matmul": [s | {"seconds": 2 * s["seconds"]} for s in H200["matmul"]]}
    assert api.post("/api/v1/calibration/import", slow).status_code == 201
    halved = api.ok("/api/v1/plan/training", ask | {"calibration": 2})
    best, worse = fast["best"][0], halved["best"][0]
    assert worse["breakdown"]["compute"] > 1.5 * best["breakdown"]["compute"]
    assert_names_field(api.post("/api/v1/plan/training", ask | {"calibration": 1, "matmul_time": "flat"}),
                       "calibration")
    assert_names_field(api.post("/api/v1/plan/training", ask | {"calibration": 1, "gpu": "h100-sxm"}),
                       "calibration")


def test_a_plans_attention_core_runs_at_the_sdpa_rates_a_profile_measured(make_api):
    api = make_api()
    ask = {"model": "llama3-8b", "gpu": "h200", "num_gpus": 8, "global_batch_sequences": 64, "seq_len": 4096,
           "top_k": 1}
    assert api.post("/api/v1/calibration/import", H200).status_code == 201
    published = api.ok("/api/v1/plan/training", ask | {"calibration": 1})
    assert "the attention core at FlashAttention's published rate" in published["assumptions"][0]
    # SDPA measured at 1 TFLOP/s forward and backward (in a fused kernel's count: the causal half,
    # a backward 2.5 forwards), far below FlashAttention's: the plan's compute grows by the cores'.
    flops = 4 * 4 * 16 * 4096**2 * 128 / 2
    sample = {"dtype": "bfloat16", "batch": 4, "heads": 16, "seq_len": 4096, "head_dim": 128, "causal": True,
              "forward_seconds": flops / 1e12, "forward_backward_seconds": 3.5 * flops / 1e12, "spread": 0,
              "jobs": [7]}
    assert api.post("/api/v1/calibration/import", H200 | {"attention": [sample]}).status_code == 201
    slow = api.ok("/api/v1/plan/training", ask | {"calibration": 2})
    assert ("the attention core at SDPA's rates measured at b4 h16 s4096 d128 (attention jobs 7)"
            in slow["assumptions"][0])
    cfg_layers, tokens = 32, 64 * 4096  # llama3-8b: 32 layers of 32 heads of 128, the cores split over 8 GPUs
    core_flops = 3.5 * cfg_layers * (4 * 32 * 4096 * 128 / 2) * tokens / 8  # per GPU, per step
    grown = slow["best"][0]["breakdown"]["compute"] - published["best"][0]["breakdown"]["compute"]
    assert grown == pytest.approx(core_flops / 1e12, rel=0.05)


def test_a_fine_tunes_step_scales_the_calibrated_full_steps_gemms_by_its_flops(make_api):
    from tests.calibration.test_profiles import store_matmul, store_steps, synthetic_step

    api = make_api()
    store_matmul(api.app.state.store)
    store_steps(api.app.state.store, campaign.train_steps("cpu"))
    profile = api.post("/api/v1/calibration/profiles").json()
    held = campaign.held_out("cpu")[7]["params"]
    ask = {"model": held["model"], "batch_size": held["batch_size"], "seq_len": held["seq_len"],
           "precision": "fp32", "optimizer": "adamw", "calibration": profile["id"]}
    full = api.ok("/api/v1/time/step", ask)["calibrated"]
    assert full["seconds"] == pytest.approx(synthetic_step(held), rel=1e-6)
    tuned = api.ok("/api/v1/finetune", ask | {"mode": "lora"})
    c = tuned["calibrated"]
    ratio = tuned["flops"]["total"] / full["flops"]
    assert 0 < ratio < 1
    assert c["gemm_seconds"] == pytest.approx(full["gemm_seconds"] * ratio)
    assert (c["op_seconds"], c["activation_seconds"]) == (full["op_seconds"], full["activation_seconds"])
    share = tuned["trainable_params"] / tuned["total_params"]
    assert c["optimizer_seconds"] == pytest.approx(full["optimizer_seconds"] * share)
    assert c["seconds"] < full["seconds"] and "fine-tune: GEMMs" in c["sources"][-1]
    assert api.ok("/api/v1/finetune", {k: v for k, v in ask.items() if k != "calibration"})["calibrated"] is None
    assert_names_field(api.post("/api/v1/finetune", ask | {"precision": "bf16"}), "calibration")


def test_a_runs_length_takes_its_mfu_from_the_profiles_step_held_at_its_sustained_ratio(api):
    ask = {"model": "llama3-8b", "tokens": 15e12, "gpu": "h200", "num_gpus": 1024, "batch_size": 4,
           "seq_len": 2048}
    run = api.ok("/api/v1/time/training", ask | {"calibration": 1})
    step = api.ok("/api/v1/time/step", {"model": "llama3-8b", "batch_size": 4, "seq_len": 2048,
                                        "precision": "bf16_autocast", "gpu": "h200",
                                        "calibration": 1})["calibrated"]
    peak = hardware.gpu("h200").peak_flop_per_sec["bfloat16"]
    sustained = H200["sustained_ratio"]["value"]
    assert run["mfu"] == pytest.approx(step["flops"] / (step["seconds"] * peak) * sustained, rel=1e-9)
    assert run["seconds"] == pytest.approx(run["flops"] / (1024 * peak * run["mfu"]))
    assert run["mfu_source"].startswith("calibrated: profile 1 (NVIDIA H200, version 1)'s bf16_autocast step")
    assert f"sustained-over-burst ratio {sustained:.3g}" in run["mfu_source"]
    assert_names_field(api.post("/api/v1/time/training", ask | {"calibration": 1, "mfu": 0.4}), "calibration")
    assert_names_field(api.post("/api/v1/time/training", ask | {"calibration": 1, "gpu": "h100-sxm"}),
                       "calibration")
    no_model = {k: v for k, v in ask.items() if k != "model"} | {"params": 8e9, "calibration": 1}
    assert_names_field(api.post("/api/v1/time/training", no_model), "model")
