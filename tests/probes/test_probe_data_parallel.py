"""The data_parallel_step probe on the CPU: two gloo processes with DDP and FSDP2, their peak
memory per rank against the memory engine's ZeRO stage 0 and 3, and its own arithmetic."""

import pytest

from app.accounting.errors import InvalidInput
from app.bench import data_parallel
from app.probes.collectives.params import CollectivesParams, collectives_need
from app.probes.data_parallel_step.params import DataParallelStepParams, data_parallel_step, fsdp_unsharded

QUICK = {"warmup_s": 0.01, "measure_s": 0.01, "min_iters": 2, "max_iters": 3}
CRUNCHER = {"kind": "cruncher", "dim": 64, "num_layers": 3}
LLAMA = {"vocab_size": 512, "d_model": 64, "n_layers": 6, "n_heads": 4, "n_kv_heads": 2, "mlp": "swiglu",
         "norm": "rmsnorm", "position": "rope", "bias": False, "tied_embeddings": False}


def quiet(*_):
    return None


@pytest.mark.parametrize(("model", "strategy", "precision"), [
    (CRUNCHER, "ddp", "fp32"), (CRUNCHER, "fsdp", "fp32"), (LLAMA, "ddp", "fp32"), (LLAMA, "fsdp", "fp32"),
    (LLAMA, "fsdp", "bf16"),
], ids=["cruncher-ddp", "cruncher-fsdp", "llama-ddp", "llama-fsdp", "llama-fsdp-bf16"])
def test_peak_memory_per_rank_within_10_percent_of_the_zero_stage(model, strategy, precision):
    """Against the busiest rank. FSDP's peak moves by a block between runs and ranks with the
    timing of its prefetches (llama fsdp fp32 over six runs: -2.1% to -4.7%; with 2 layers, where
    a block is a larger share, +3.4% to +9.2%, and once +10.0% on CI): 6 layers keep that inside
    the bound the issue sets."""
    r = data_parallel.run(QUICK | {"device": "cpu", "model": model, "batch_size": 2, "seq_len": 64,
                                   "strategy": strategy, "steps": 2, "warmup_steps": 1,
                                   "optimizer": "adamw", "precision": precision}, quiet)
    assert r["ranks"] == 2 and r["backend"] == "gloo" and r["zero_stage"] == {"ddp": 0, "fsdp": 3}[strategy]
    m = r["memory"]
    assert abs(m["relative_error"]) < 0.10, m
    assert m["relative_error"] == m["predicted"]["total"] / m["measured_peak_allocated"] - 1
    assert r["peak_bytes_least_rank"] <= m["measured_peak_allocated"] <= r["peak_bytes_most_rank"]
    params = r["params"]
    if model is CRUNCHER:
        assert params == 3 * 64 * 64 + 64  # three 64 x 64 layers and the 64 -> 1 head
    # AdamW: 4 bytes of weights and 8 of moments per parameter in fp32 (2 and 4 in bf16), halved by FSDP
    shards, width = 2 if strategy == "fsdp" else 1, 4 if precision == "fp32" else 2
    assert m["predicted"]["parameters"] == width * params // shards
    assert m["predicted"]["optimizer_state"] == 2 * width * params // shards
    assert ("fsdp_unsharded" in m["predicted"]) == (strategy == "fsdp")
    step, alone = r["step"]["median"], r["one_rank_step"]["median"]
    assert r["exposed_communication_s"] == step - alone
    assert r["scaling_efficiency"] == pytest.approx(alone / step)
    assert r["tokens_per_sec"] == pytest.approx(2 * 2 * 64 / step)
    assert r["loss_first"] > 0 and r["loss_last"] > 0


def test_fsdp_unsharded_buffers_are_the_root_and_three_blocks():
    """Cruncher dim 64: the root keeps the 64 -> 1 head whole; a block is one 64 x 64 layer."""
    p = DataParallelStepParams.model_validate({"model": CRUNCHER, "strategy": "fsdp"})
    assert fsdp_unsharded(p, None) == 4 * (64 + 3 * 64 * 64)


def test_a_fine_tune_and_too_many_cpu_ranks_are_refused_by_name():
    with pytest.raises(InvalidInput) as refused:
        data_parallel_step(DataParallelStepParams.model_validate({"model": LLAMA, "mode": "lora"}),
                                   False, 2)
    assert refused.value.field == "params.mode"
    with pytest.raises(InvalidInput) as refused:
        collectives_need(CollectivesParams.model_validate({"ranks": 9}), "cpu")
    assert refused.value.field == "params.ranks"
    collectives_need(CollectivesParams.model_validate({"ranks": 9}), "cuda")  # 9 GPUs may exist
