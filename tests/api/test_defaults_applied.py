"""One set of defaults, and every calculator answer says which of them it applied."""

import pytest

from app.api.responses import defaults_applied
from app.api.services.memory import TrainingMemoryRequest
from app.main import create_app

MEMORY = "/api/v1/memory/training"
CALCULATORS = {  # path: the smallest body it answers
    "/api/v1/flops/transformer": {"model": "gpt2"},
    "/api/v1/flops/matmul": {"m": 8, "k": 8, "n": 8},
    "/api/v1/flops/mlp": {"batch": 8, "dims": [8, 8]},
    "/api/v1/memory/training": {"model": "gpt2"},
    "/api/v1/memory/max-model": {"gpu": "h100-sxm"},
    "/api/v1/time/training": {"params": 10**9, "tokens": 10**10, "gpu": "h100-sxm"},
    "/api/v1/time/mfu": {"flops": 1e15, "seconds": 1, "gpu": "h100-sxm"},
    "/api/v1/tensors/memory": {"shape": [4, 4]},
    "/api/v1/tensors/layout": {"shape": [4, 4]},
    "/api/v1/dtypes/encode": {"value": 0.1, "dtype": "bf16"},
    "/api/v1/comm/collective": {"collective": "all_reduce", "bytes": 1024, "ranks": 2, "gpu": "h100-sxm"},
    "/api/v1/plan/training": {"model": "gpt2", "gpu": "h100-sxm", "num_gpus": 2, "global_batch_sequences": 4},
    "/api/v1/data/dataset": {"tokens": 1000, "vocab_size": 50257},
    "/api/v1/checkpoint": {"model": "gpt2", "write_bytes_per_s": 1e9, "read_bytes_per_s": 1e9},
    "/api/v1/energy": {"gpu_hours": 1, "power_watts": 400},
}


def test_memory_recomputes_selectively_by_default(api):
    """FlashAttention-era training recomputes the attention core (Korthikanti et al. 2022), and
    pages, CLI and API all start from the request model's default."""
    question = {"model": "llama3-8b", "gpu": "h100-sxm", "seq_len": 4096}
    answer = api.ok(MEMORY, question)
    assert answer == api.ok(MEMORY, question | {"recompute": "selective"}) | {
        "defaults_applied": answer["defaults_applied"]}
    assert answer["activations"] < api.ok(MEMORY, question | {"recompute": "none"})["activations"]
    assert answer["defaults_applied"]["recompute"] == "selective"
    assert TrainingMemoryRequest.model_fields["recompute"].default == "selective"


@pytest.mark.parametrize("path,body", CALCULATORS.items())
def test_every_calculator_lists_the_fields_left_out(api, path, body):
    answer = api.ok(path, body)
    applied = answer["defaults_applied"]
    assert not set(applied) & set(body)
    assert applied  # each smallest body leaves something to a default


def test_defaults_applied_lists_each_left_out_field_with_its_value(api):
    answer = api.ok(MEMORY, {"model": "gpt2", "zero_stage": 2, "gpu": "h100-sxm"})
    assert answer["defaults_applied"] == {
        "precision": "bf16_mixed", "optimizer": "adamw", "batch_size": 1, "seq_len": None,
        "recompute": "selective", "data_parallel": 1, "tensor_parallel": 1, "pipeline_parallel": 1,
        "expert_parallel": 1,
        "sequence_parallel": True, "virtual_stages": 1, "gpu_overrides": None, "first_stage_layers": None,
        "last_stage_layers": None, "context_parallel": 1, "context_parallel_algorithm": "ring",
        "activation_offload": False, "loss_chunks": 1}
    # A field sent with its default's value was chosen, not defaulted.
    chosen = api.ok(MEMORY, {"model": "gpt2", "recompute": "selective"})["defaults_applied"]
    assert "recompute" not in chosen and "zero_stage" in chosen


def test_pages_get_the_same_dict():
    body = TrainingMemoryRequest.model_validate({"model": "gpt2", "batch_size": 4})
    applied = defaults_applied(body)
    assert applied["recompute"] == "selective" and "batch_size" not in applied and "model" not in applied


def test_the_response_schema_declares_it():
    doc = create_app().openapi()
    for path in CALCULATORS:
        ref = doc["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        schema = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        assert schema["properties"]["defaults_applied"]["type"] == "object", path
