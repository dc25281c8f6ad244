"""POST /api/v1/time/training takes a model, as the Time page does (issue 28, point 13): N in
6*N*D is the model's active parameters, the count the models listing gives."""

from tests.support.api import assert_names_field

TIME = "/api/v1/time/training"
ASK = {"tokens": "15T", "gpu": "h100-sxm", "num_gpus": 1024, "mfu": 0.5}


def test_a_model_stands_for_its_active_parameters(api):
    for model in ("llama3-70b", "mixtral-8x7b"):
        active = api.get(f"/api/v1/models/{model}").json()["params"]["active"]
        by_model = api.ok(TIME, ASK | {"model": model})
        by_count = api.ok(TIME, ASK | {"params": active})
        assert by_model["flops"] == by_count["flops"] == 6 * active * 15e12
        assert by_model["days"] == by_count["days"]


def test_model_and_params_together_are_refused_naming_model(api):
    assert_names_field(api.post(TIME, ASK | {"model": "llama3-70b", "params": "70B"}), "model")
    assert_names_field(api.post(TIME, {"model": "llama3-70b", "gpu": "h100-sxm"}), "tokens")
