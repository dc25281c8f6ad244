"""The layout search's energy: each answered layout's step at the plan's power x PUE, per step
and per token, and the run's given its training tokens. Checked against the step's own time by
the model cards' rule, worked by hand: J = seconds x GPUs x W x PUE; g = J / 3.6e6 x g/kWh."""

import math

import pytest

from app.numbers import kwh, sig
from tests.support.api import assert_names_field

PLAN = "/api/v1/plan/training"
# gpt2 on one HGX node: 64 sequences of 1,024 tokens = 65,536 tokens per step.
BODY = {"model": "gpt2", "gpu": "h100-sxm", "num_gpus": 8, "global_batch_sequences": 64, "seq_len": 1024,
        "top_k": 3}
TOKENS_PER_STEP = 64 * 1024


def test_each_layout_costs_its_step_at_the_board_power(api):
    """Defaults: 700 W (the H100 SXM's board power) x PUE 1.1 on the US average, 385 g/kWh."""
    answer = api.ok(PLAN, BODY)
    assert len(answer["best"]) == 3
    for layout in answer["best"]:
        joules = layout["step_seconds"] * 8 * 700 * 1.1
        e = layout["energy"]
        assert e["joules_per_step"] == pytest.approx(joules, rel=1e-12)
        assert e["joules_per_token"] == pytest.approx(joules / TOKENS_PER_STEP, rel=1e-12)
        assert e["co2e_grams_per_step"] == pytest.approx(joules / 3.6e6 * 385, rel=1e-12)
    stated = answer["energy"]
    assert (stated["power_watts_per_gpu"], stated["pue"], stated["grid_g_per_kwh"]) == (700, 1.1, 385)
    assert stated["run"] is None and stated["training_tokens"] is None
    assert {"pue", "region", "power_watts", "training_tokens"} <= set(answer["defaults_applied"])


def test_the_run_on_the_fastest_layout_given_its_tokens(api):
    """1e9 tokens are ceil(1e9 / 65,536) = 15,259 steps; at 500 W, PUE 1.2, 57 g/kWh (France)."""
    given = {"training_tokens": 10**9, "power_watts": 500, "pue": 1.2, "region": "france"}
    answer = api.ok(PLAN, BODY | given)
    fastest = answer["best"][0]
    steps = math.ceil(1e9 / TOKENS_PER_STEP)
    assert steps == 15_259 and answer["energy"]["steps"] == steps
    kwh = steps * fastest["step_seconds"] * 8 * 500 * 1.2 / 3.6e6
    run = answer["energy"]["run"]
    assert run["energy_kwh"] == pytest.approx(kwh, rel=1e-12)
    assert run["co2e_tonnes"] == pytest.approx(kwh * 57 / 1e6, rel=1e-12)
    assert run["power_source"] == "given" and run["grid_region"] == "france"
    assert fastest["energy"]["joules_per_step"] == pytest.approx(fastest["step_seconds"] * 8 * 500 * 1.2)


def test_a_gpu_without_a_board_power_plans_without_energy(api):
    """The A10G has no vendor power figure in the catalogue: the layouts, but no guessed energy."""
    answer = api.ok(PLAN, BODY | {"gpu": "a10g"})
    assert answer["energy"] is None and all(layout["energy"] is None for layout in answer["best"])


@pytest.mark.parametrize("extra,field", [({"pue": 0.8}, "pue"), ({"power_watts": -1}, "power_watts"),
                                         ({"grid_g_per_kwh": -5}, "grid_g_per_kwh"),
                                         ({"training_tokens": 0}, "training_tokens")])
def test_bad_energy_inputs_are_422_naming_the_field(api, extra, field):
    assert_names_field(api.post(PLAN, BODY | extra), field)


def test_the_scale_page_lists_joules_per_token_and_the_runs_energy(api):
    answer = api.ok(PLAN, BODY | {"top_k": 5, "training_tokens": 10**9})
    page = api.get("/ui/scale?model=gpt2&gpu=h100-sxm&num_gpus=8&global_batch_sequences=64&seq_len=1024"
                   "&training_tokens=1e9").text
    first = answer["best"][0]["step_seconds"] * 8 * 700 * 1.1 / TOKENS_PER_STEP
    assert f'data-testid="energy-1">{sig(first)}<' in page
    assert f'data-testid="run-energy">{kwh(answer["energy"]["run"]["energy_kwh"])}<' in page
