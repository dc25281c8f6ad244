"""POST /api/v1/plan/training: the catalogue's links, the search's answer, and bad input named."""

import pytest

from tests.support.api import assert_names_field

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
    exposed = sum(parts[k] for k in ("compute", "tensor_parallel", "expert_parallel", "pipeline_p2p",
                                     "pipeline_bubble", "data_parallel"))
    assert best["step_seconds"] == pytest.approx(exposed)
    assert best["memory"]["total"] == best["memory_bytes"] <= 80e9


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
])
def test_bad_input_names_the_field(api, body, field):
    assert_names_field(api.post("/api/v1/plan/training", BASE | body), field)


def test_a_search_too_large_to_time_is_refused_naming_the_limits(api):
    # 73,513,440 sequences have 768 divisors: with 6 interleavings, 4 ZeRO stages and 3
    # recomputes, 55,296 candidates on one GPU, past the search's cap of 50,000.
    body = {"model": "gpt2", "gpu": "h100-sxm", "num_gpus": 1, "global_batch_sequences": 73_513_440,
            "seq_len": 128}
    refused = assert_names_field(api.post("/api/v1/plan/training", body), "limits")
    assert "55,296 layouts" in refused["message"]
    narrowed = api.ok("/api/v1/plan/training", body | {"limits": {"micro_batch": [8, 16]}})
    assert narrowed["evaluated"] == 2 * 4 * 3


def test_an_overridden_interconnect_is_the_node_link(api):
    # gpu_overrides.interconnect_bytes_per_sec is the part's one link figure: the plan's node ring
    # and the collective calculator both run at it.
    body = BASE | {"gpu_overrides": {"interconnect_bytes_per_sec": 100e9}}
    assert api.ok("/api/v1/plan/training", body)["intra_node"]["bytes_per_sec"] == 100e9
    ring = api.ok("/api/v1/comm/collective", {
        "collective": "all_gather", "bytes": "1GB", "ranks": 8, "gpu": "h100-sxm", "base_latency_s": 0,
        "intra_node_latency_s": 0, "gpu_overrides": {"interconnect_bytes_per_sec": 100e9}})
    assert ring["busbw_bytes_per_sec"] == pytest.approx(100e9)
