"""POST /api/v1/plan/training: the catalogue's links, the search's answer, and bad input named."""

import pytest

from tests.support.api import assert_names_field
from tests.support.devices import H100_REPORTED_BYTES

BASE = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 16, "global_batch_sequences": 32,
        "seq_len": 2048}


def test_the_plan_takes_the_node_and_network_from_the_catalogue(api):
    answer = api.ok("/api/v1/plan/training", BASE | {"include_points": True})
    ic = api.get("/api/v1/hardware/h100-sxm").json()["interconnect"]
    assert (answer["nodes"], answer["gpus_per_node"]) == (2, 8)
    assert answer["intra_node"]["bytes_per_sec"] == ic["node_link_bytes_per_sec"]
    assert answer["inter_node"]["bytes_per_sec"] == ic["network_bytes_per_sec_per_node"] / 8
    assert answer["inter_node"]["latency_s"] == ic["network_latency_s"]
    assert answer["tokens_per_step"] == 32 * 2048
    assert answer["peak_flop_per_sec"] == 989.5e12  # bf16_mixed runs its matmuls in bf16
    assert len(answer["best"]) == 5 and answer["evaluated"] == len(answer["points"])
    assert set(answer["refusal_reasons"]) == set(answer["refused"])
    best = answer["best"][0]
    assert best["step_seconds"] == min(p["step_seconds"] for p in answer["points"] if p["fits"])
    parts = best["breakdown"]
    exposed = sum(parts[k] for k in ("compute", "tensor_parallel", "context_parallel", "activation_offload",
                                     "expert_parallel", "pipeline_p2p", "pipeline_bubble", "data_parallel"))
    assert best["step_seconds"] == pytest.approx(exposed)
    assert best["memory"]["total"] == best["memory_bytes"] <= H100_REPORTED_BYTES


def test_tokens_and_given_links_are_taken(api):
    tokens = {k: v for k, v in BASE.items() if k != "global_batch_sequences"} | {"global_batch_tokens": 65536}
    by_tokens = api.ok("/api/v1/plan/training", tokens)
    assert by_tokens["global_batch_sequences"] == 32
    slow = api.ok("/api/v1/plan/training", BASE | {"inter_node_bytes_per_sec": 1e9})
    assert slow["inter_node"]["source"] == "given"
    assert slow["best"][0]["step_seconds"] > by_tokens["best"][0]["step_seconds"]


def test_a_pcie_part_across_nodes_needs_its_network(api):
    body = BASE | {"gpu": "l40s"}
    assert_names_field(api.post("/api/v1/plan/training", body), "inter_node_bytes_per_sec")
    answer = api.ok("/api/v1/plan/training", body | {"inter_node_bytes_per_sec": 25e9})
    assert answer["intra_node"]["latency_s"] == 5.7e-6  # NCCL's PCIe step latency


def test_nothing_fitting_answers_the_closest(api):
    body = BASE | {"model": "llama3-70b", "num_gpus": 8, "global_batch_sequences": 8,
                   "limits": {"zero_stage": [0], "recompute": ["none"]}}
    answer = api.ok("/api/v1/plan/training", body)
    assert answer["fitting"] == 0 and answer["best"] == []
    assert answer["least_memory"]["memory_bytes"] > 80e9


@pytest.mark.parametrize(("body", "field"), [
    ({"num_gpus": 12}, "num_gpus"),
    ({"global_batch_tokens": 4096}, "global_batch_sequences"),
    ({"global_batch_sequences": None}, "global_batch_sequences"),
    ({"global_batch_sequences": None, "global_batch_tokens": 1000}, "global_batch_tokens"),
    ({"gpu": "tpu-v5e"}, "gpus_per_node"),
    ({"limits": {"zero_stage": [4]}}, "limits.zero_stage.0"),
    ({"limits": {"tensor_parallel": []}}, "limits.tensor_parallel"),
    ({"compute_efficiency": 0}, "compute_efficiency"),
    ({"precision": "fp8"}, "precision"),
    ({"model": "llama9"}, "model"),
    ({"limits": {"first_stage_layers": 0}}, "limits.first_stage_layers"),
    ({"limits": {"context_parallel": [0]}}, "limits.context_parallel.0"),
    ({"context_parallel_algorithm": "tree"}, "context_parallel_algorithm"),
    ({"fp8_param_gather": True}, "fp8_param_gather"),            # with bf16_mixed
    ({"precision": "fp8_delayed", "gpu": "a100-80gb"}, "precision"),  # Ampere has no FP8 tensor cores
    ({"matmul_time": "exact"}, "matmul_time"),
    ({"matmul_time": "shaped", "compute_efficiency": 0.5}, "compute_efficiency"),  # shaped times GEMMs itself
    ({"limits": {"recompute": ["op_selective"]}, "model": "mixtral-8x7b"}, "recompute"),
])
def test_bad_input_names_the_field(api, body, field):
    assert_names_field(api.post("/api/v1/plan/training", BASE | body), field)


def test_a_search_too_large_to_time_is_refused_naming_the_limits(api):
    # 73,513,440 = 2^5 3^3 5 7 11 13 17 sequences have 768 divisors, half of them 36,756,720 has
    # 640. On 2 GPUs: dp2 (640 micro-batch sizes), tp2 (768) and pp2 (768, with 5 interleavings of
    # GPT-2's 6 + 6 layers: 1, 2, 3, 6, and 7 counting the embedding and the loss as layers), each with
    # 4 ZeRO stages and 3 recomputes: (640 + 768 + 768 x 5) x 12 = 62,976, past the cap of 50,000.
    body = {"model": "gpt2", "gpu": "h100-sxm", "num_gpus": 2, "global_batch_sequences": 73_513_440,
            "seq_len": 128}
    refused = assert_names_field(api.post("/api/v1/plan/training", body), "limits")
    assert "62,976 layouts" in refused["message"]
    narrowed = api.ok("/api/v1/plan/training", body | {"limits": {"micro_batch": [8, 16]}})
    assert narrowed["evaluated"] == (2 + 2 + 2 * 5) * 4 * 3


def test_an_overridden_interconnect_is_the_node_link(api):
    # gpu_overrides.interconnect_bytes_per_sec is the part's one link figure: the plan's node ring
    # and the collective calculator both run at it.
    body = BASE | {"gpu_overrides": {"interconnect_bytes_per_sec": 100e9}}
    assert api.ok("/api/v1/plan/training", body)["intra_node"]["bytes_per_sec"] == 100e9
    ring = api.ok("/api/v1/comm/collective", {
        "collective": "all_gather", "bytes": "1GB", "ranks": 8, "gpu": "h100-sxm", "base_latency_s": 0,
        "intra_node_latency_s": 0, "gpu_overrides": {"interconnect_bytes_per_sec": 100e9}})
    # An override is a line rate, as the catalogue's figure it replaces: a ring over the H100's NVLink 4
    # gets 82% of it (8 x H200 with NVLS off: 367.6 of 450 GB/s, stas00/ml-engineering network/README.md).
    assert ring["busbw_bytes_per_sec"] == pytest.approx(0.82 * 100e9)


def test_a_published_layout_is_entered_as_published(api):
    # Llama 3 405B's 126 layers on 16 stages, 8 chunks each, with FSDP (ZeRO-3) over data parallelism
    # and an FP8 recipe: all expressible, and the answer shows every stage's memory.
    body = {"model": "llama3.1-405b", "gpu": "h100-sxm", "num_gpus": 2048, "global_batch_sequences": 256,
            "seq_len": 8192, "precision": "fp8_delayed",
            "limits": {"tensor_parallel": [8], "pipeline_parallel": [16], "virtual_stages": [8],
                       "first_stage_layers": 7, "last_stage_layers": 7, "zero_stage": [3], "micro_batch": [1],
                       "recompute": ["full"]}}
    best = api.ok("/api/v1/plan/training", body)["best"][0]
    assert best["layout"]["pipeline_split"] == [7] + [8] * 14 + [7]
    assert best["layout"]["virtual_stages"] == 8 and best["layout"]["zero_stage"] == 3
    stages = best["memory"]["stages"]
    assert {s["stage"] for s in stages} == {0, 1, 15}
    assert best["memory_bytes"] == max(s["total"] for s in stages)


@pytest.mark.parametrize(("body", "field"), [
    ({"first_stage_layers": 5}, "first_stage_layers"),                        # one stage
    ({"pipeline_parallel": 4, "first_stage_layers": 40}, "first_stage_layers"),  # leaves the others none
    ({"context_parallel": 16, "seq_len": 4100}, "context_parallel"),           # not 32 equal chunks
    ({"context_parallel": 4, "model": 8_000_000_000}, "context_parallel"),    # a bare count has no sequence
    ({"context_parallel_algorithm": "tree"}, "context_parallel_algorithm"),
    ({"pipeline_parallel": 4, "virtual_stages": 3}, "virtual_stages"),
])
def test_training_memory_names_the_new_fields_it_refuses(api, body, field):
    base = {"model": "llama3-8b", "seq_len": 4096}
    assert_names_field(api.post("/api/v1/memory/training", base | body), field)


def test_shaped_matmuls_give_small_models_a_lower_efficiency(api):
    # Each GEMM timed from its shape (app/accounting/matmul.py): a 124M-parameter GPT-2's 768-wide GEMMs
    # reach a smaller share of the peak than Llama 3 8B's 4,096-wide ones, on the same GPUs.
    def mfu(model: str) -> float:
        body = {"model": model, "gpu": "h100-sxm", "num_gpus": 8, "global_batch_sequences": 64, "seq_len": 1024,
                "matmul_time": "shaped", "limits": {"recompute": ["full"]}}
        answer = api.ok("/api/v1/plan/training", body)
        assert answer["compute_efficiency"] is None
        return answer["best"][0]["mfu"]

    assert mfu("gpt2") < mfu("llama3-8b")
