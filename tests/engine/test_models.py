"""Presets and Hugging Face import, against published parameter counts."""

import json

import pytest

from tests.support import FIXTURES
from tests.support.api import assert_names_field
from tests.support.reference import lm_from_config, n_params

HF_CONFIGS = FIXTURES / "hf_configs"
EXPECTED = json.loads((HF_CONFIGS / "expected.json").read_text())


def test_course_preset_counts(api):
    by_name = {m["name"]: m for m in api.get("/api/v1/models").json()["data"]}
    assert by_name["gpt2"]["params"]["total"] == 124_439_808
    assert by_name["gpt2"]["config"]["tied_embeddings"] is True
    assert by_name["llama2-7b"]["params"]["total"] == 6_738_415_616
    assert by_name["llama3-8b"]["params"]["total"] == 8_030_261_248


def test_required_presets_exist(api):
    names = {m["name"] for m in api.get("/api/v1/models").json()["data"]}
    assert {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b", "llama2-7b", "llama2-13b",
            "llama2-70b", "llama3-8b", "llama3-70b", "cs336-small", "cs336-medium", "cs336-large",
            "cs336-xl", "cs336-2.7b"} <= names


@pytest.mark.parametrize("name,shape", [
    ("cs336-small", (768, 3072, 12, 12)), ("cs336-medium", (1024, 4096, 24, 16)),
    ("cs336-large", (1280, 5120, 36, 20)), ("cs336-xl", (1600, 6400, 48, 25)),
    ("cs336-2.7b", (2560, 10240, 32, 32)),
])
def test_course_assignment_sizes(api, name, shape):
    cfg = api.get(f"/api/v1/models/{name}").json()["config"]
    assert (cfg["d_model"], cfg["d_ff"], cfg["n_layers"], cfg["n_heads"]) == shape


@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium", "llama2-7b", "llama3-8b", "mistral-7b",
                                  "cs336-small", "gpt3-175b"])
def test_preset_counts_match_the_reference_model(api, name):
    body = api.get(f"/api/v1/models/{name}").json()
    assert body["params"]["total"] == n_params(lm_from_config(body["config"]))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hf_import_matches_published_counts(api, name):
    config = json.loads((HF_CONFIGS / f"{name}.json").read_text())
    body = api.ok("/api/v1/models/import", config)
    assert body["params"]["total"] == EXPECTED[name]["total_params"], EXPECTED[name]["source"]
    assert body["model_type"] == config["model_type"]
    # The imported config drives the other calculators unchanged.
    again = api.ok("/api/v1/flops/transformer", {"model": body["config"], "seq_len": 128})
    assert again["params"]["total"] == body["params"]["total"]


def test_pythia_non_embedding_count(api):
    config = json.loads((HF_CONFIGS / "pythia-160m.json").read_text())
    body = api.ok("/api/v1/models/import", config)
    assert body["params"]["non_embedding"] == EXPECTED["pythia-160m"]["non_embedding_params"]


def test_import_rejections_name_the_config_key(api):
    assert_names_field(api.post("/api/v1/models/import", {"model_type": "mamba"}), "model_type")
    assert_names_field(api.post("/api/v1/models/import", {"hidden_size": 8}), "model_type")
    llama = json.loads((HF_CONFIGS / "llama-2-7b.json").read_text())
    assert_names_field(api.post("/api/v1/models/import", {**llama, "hidden_size": 0}), "hidden_size")
    assert_names_field(api.post("/api/v1/models/import", {**llama, "hidden_size": "4096"}), "hidden_size")
    missing = {k: v for k, v in llama.items() if k != "num_hidden_layers"}
    assert_names_field(api.post("/api/v1/models/import", missing), "num_hidden_layers")
    assert_names_field(api.post("/api/v1/models/import", [1, 2]), "body")


def test_unknown_model_is_404(api):
    response = api.get("/api/v1/models/gpt-5")
    assert_names_field(response, "name", status=404)
