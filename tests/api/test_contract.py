"""Field and path names other tools call (issue 2's contract): renaming one breaks them."""

import pytest

CONTRACT = [
    ("/api/v1/dtypes/encode", {"value": 1.0, "dtype": "fp16"},
     {"stored", "bits", "category", "underflow", "overflow", "abs_error", "rel_error"}),
    ("/api/v1/tensors/memory", {"shape": [2, 3], "dtype": "bf16"},
     {"numel", "element_size", "bytes", "human_gb", "human_gib"}),
    ("/api/v1/tensors/layout", {"shape": [2, 3], "stride": [3, 1], "storage_offset": 0, "index": [1, 1],
                                "view_shape": [3, 2]},
     {"is_contiguous", "contiguous_stride", "storage_index", "view"}),
    ("/api/v1/flops/matmul", {"m": 2, "k": 3, "n": 4, "batch": 5}, {"flops", "macs", "flops_without_fma"}),
    ("/api/v1/flops/mlp", {"batch": 2, "dims": [3, 4], "input_requires_grad": True},
     {"layers", "forward", "backward", "total", "approx_forward", "approx_backward", "approx_total"}),
    ("/api/v1/flops/transformer", {"model": "gpt2", "batch_size": 1, "seq_len": 8, "causal": "full"},
     {"params", "forward", "backward", "step", "six_n_d", "ratio_to_six_n_d"}),
    ("/api/v1/memory/training", {"model": "gpt2", "precision": "fp32", "optimizer": "adamw", "batch_size": 1,
                                 "seq_len": 8, "recompute": "none", "zero_stage": 0, "data_parallel": 1,
                                 "tensor_parallel": 1, "pipeline_parallel": 1, "gpu": "l4"},
     {"parameters", "gradients", "optimizer_state", "master_weights", "activations", "total",
      "bytes_per_param", "checkpoint_bytes", "fits", "headroom"}),
    ("/api/v1/memory/max-model", {"gpu": "l4", "num_gpus": 2, "precision": "bf16", "optimizer": "sgd"},
     {"max_params"}),
    ("/api/v1/time/training", {"params": 1e9, "tokens": 1e10, "gpu": "l4", "dtype": "bf16", "num_gpus": 2,
                               "mfu": 0.4, "price_per_gpu_hour": 1.0},
     {"seconds", "days", "gpu_hours", "cost"}),
    ("/api/v1/time/mfu", {"flops": 1e15, "seconds": 10, "peak_flop_per_sec": 1e15, "dtype": "bf16",
                          "num_gpus": 1},
     {"achieved_flop_per_sec", "promised_flop_per_sec", "mfu"}),
]


@pytest.mark.parametrize("path,body,fields", CONTRACT, ids=[c[0] for c in CONTRACT])
def test_contract_fields(api, path, body, fields):
    assert fields <= set(api.ok(path, body)), fields - set(api.ok(path, body))


def test_contract_nested_names(api):
    transformer = api.ok("/api/v1/flops/transformer", {"model": "gpt2"})
    assert {"total", "embedding", "non_embedding"} <= set(transformer["params"])
    assert {"attention_qkv", "attention_scores", "attention_values", "attention_output", "mlp",
            "lm_head"} <= set(transformer["forward"])
    dtype = api.get("/api/v1/dtypes/float32").json()
    assert {"bits", "bytes", "exponent_bits", "mantissa_bits", "max", "min_normal", "min_subnormal",
            "eps"} <= set(dtype)
    gpu = api.get("/api/v1/hardware/h100-sxm").json()
    assert {"peak_flop_per_sec", "memory_bytes", "memory_bandwidth_bytes_per_sec", "source"} <= set(gpu)
    preset = api.get("/api/v1/models").json()["data"][0]
    assert {"n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "mlp", "norm", "bias",
            "tied_embeddings", "position", "max_seq_len"} <= set(preset["config"])


def test_the_checkpoint_probes_speeds_are_top_level_numbers(api):
    """The checkpoint calculator reads a checkpoint job's measured bandwidth by these keys."""
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    result = schemas["CheckpointResult"]
    keys = {"write_bytes_per_s", "read_bytes_per_s", "file_bytes", "predicted_bytes"}
    assert keys <= set(result["required"])
    assert result["properties"]["write_bytes_per_s"]["type"] == "number"
    assert result["properties"]["read_bytes_per_s"]["type"] == "number"
