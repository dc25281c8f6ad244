"""The published-runs benchmark's cases (bench/published/*.toml) are well formed: every case
names its source, its GPU and at least one published figure of a kind the runner compares;
ids are unique; a layout adds up to the GPU count it claims. Reads the files only: no request
is sent, nothing is predicted (bench/published_training.py does that)."""

import importlib.util
import math
import tomllib
from pathlib import Path

import pytest

from app.accounting import models

BENCH = next(p for p in Path(__file__).resolve().parents if (p / "bench").is_dir()) / "bench"
SPEC = importlib.util.spec_from_file_location("published_training", BENCH / "published_training.py")
runner = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(runner)


def cases(name: str) -> list[dict]:
    with open(BENCH / "published" / f"{name}.toml", "rb") as f:
        return tomllib.load(f)["case"]


TRAINING, FINETUNE = cases("training"), cases("finetune")
LAYOUT_KEYS = {"tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "expert_parallel",
               "zero_stage", "micro_batch", "virtual_stages", "recompute", "sequence_parallel",
               "first_stage_layers", "last_stage_layers", "activation_offload"}
RECOMPUTE = {"none", "selective", "full", "op_selective"}


def test_there_are_enough_cases():
    assert len(TRAINING) >= 25 and len(FINETUNE) >= 8


def test_ids_are_unique_across_both_files():
    ids = [c["id"] for c in TRAINING + FINETUNE]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", TRAINING + FINETUNE, ids=lambda c: c["id"])
def test_every_case_cites_its_source_and_names_a_gpu_and_a_model(case):
    assert case["citation"].strip() and case["source"].strip()
    assert isinstance(case["gpu"], str) and case["gpu"]
    model = case.get("model")
    assert isinstance(model, dict) or model in models.presets(), model
    for note in case.get("assumed", []):  # "what: why"
        assert ":" in note, note


@pytest.mark.parametrize("case", TRAINING, ids=lambda c: c["id"])
def test_a_training_case_has_published_figures_and_a_whole_layout(case):
    figures = case["published"]
    assert figures and set(figures) <= set(runner.TRAINING_KINDS), set(figures) - set(runner.TRAINING_KINDS)
    assert all(isinstance(v, (int, float)) and v > 0 and math.isfinite(v) for v in figures.values())
    assert all(figures[k] < 1 for k in ("mfu", "hfu") if k in figures)  # fractions, not percent
    if "tflops_per_gpu" in figures:
        assert case["tflops_count"] in ("model", "hardware")
    if "gpu_hours" in figures:
        assert case["training_tokens"] > 0
    assert ("global_batch_sequences" in case) != ("global_batch_tokens" in case)
    assert case["num_gpus"] >= 1 and case["seq_len"] >= 1
    layout = case.get("layout", {})
    assert set(layout) <= LAYOUT_KEYS, set(layout) - LAYOUT_KEYS
    assert layout.get("recompute", "full") in RECOMPUTE
    axes = ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel")
    degrees = [layout.get(k, 1 if k == "context_parallel" else None) for k in axes]
    if all(d is not None for d in degrees):
        assert math.prod(degrees) == case["num_gpus"], degrees
    if "first_stage_layers" in layout and isinstance(case.get("model"), dict):
        middle = case["model"]["n_layers"] - layout["first_stage_layers"] - layout["last_stage_layers"]
        assert middle % (layout["pipeline_parallel"] - 2) == 0  # the middle stages share the rest evenly


@pytest.mark.parametrize("case", FINETUNE, ids=lambda c: c["id"])
def test_a_finetune_case_has_a_memory_or_context_figure_and_its_sequence(case):
    figures = case["published"]
    assert figures and set(figures) <= set(runner.FINETUNE_KINDS), set(figures) - set(runner.FINETUNE_KINDS)
    assert all(isinstance(v, (int, float)) and v > 0 for v in figures.values())
    if "longest_context" in figures:
        assert "seq_len" not in case  # the runner bisects it
    else:
        assert case["seq_len"] >= 1
    assert case["stack"] in ("hf", "unsloth", "torchtune")


def test_every_case_becomes_a_request_with_its_published_layout_pinned():
    """What the runner sends: each published degree as a one-value list in limits (the stage
    sizes as plain numbers), the implied data-parallel degree left out, extras at the top, or named
    on the rows when the plan has no mechanism for them (torch.compile)."""
    for case in TRAINING:
        body = runner.training_body(case)
        layout, limits = case.get("layout", {}), body.get("limits", {})
        for key in runner.LIMIT_KEYS:
            assert limits.get(key) == ([layout[key]] if key in layout else None), (case["id"], key)
        assert "data_parallel" not in limits
        # Extras are sent, but those the plan has no mechanism for, which its rows name instead.
        extra = set(case.get("extra", {}))
        assert extra - set(runner.UNMODELLED) <= set(body) and not extra & set(runner.UNMODELLED) & set(body)
        assert all(k in runner.unmodelled(case) for k in extra & set(runner.UNMODELLED))
    for case in FINETUNE:
        body = runner.finetune_body(case)
        assert body["stack"] == case["stack"] and body["model"] == case["model"]


def test_every_case_is_a_request_the_api_takes():
    """Every published setup is expressible field by field: the request the runner builds passes
    the API's schema (a refusal for what the setup means, as PaLM's TPU pod, is the runner's row)."""
    from app.api.services.finetune import FineTuneRequest
    from app.api.services.plan import TrainingPlanRequest

    for case in TRAINING:
        TrainingPlanRequest.model_validate(runner.training_body(case))
    for case in FINETUNE:
        FineTuneRequest.model_validate(runner.finetune_body(case))
