"""Energy and carbon (app/accounting/energy.py) against the figures model cards publish.

Llama 2's model card ("Carbon Footprint" table) follows LLaMA's method (Touvron et al. 2023a,
after Wu et al. 2022): MWh = GPU-hours x power x PUE 1.1, tCO2eq = MWh x 0.385 (the US average).
Its figures are cut, not rounded, to two decimals: 13B's 62.4476 t is printed 62.44, 34B's
153.9074 t 153.90. BLOOM (Luccioni et al. 2022): 1,082,990 A100-hours at 400 W are 433,196 kWh of
GPU energy (no PUE), 24.7 tonnes on the French grid's 57 gCO2eq/kWh.
"""

import json
import math

import pytest

from app.jobs.store import Store
from app.probes.sustained import Sustained
from tests.support import ROOT
from tests.support.api import assert_names_field
from tests.support.bench_jobs import finished, here
from tests.support.results import minimal, result_for

ENERGY = "/api/v1/energy"
TIME = "/api/v1/time/training"
MODEL_CARD = {"pue": 1.1, "region": "us-average"}
# Llama 2 model card: (GPU-hours, power W, tCO2eq) per model.
LLAMA2 = {"7B": (184_320, 400, 31.22), "13B": (368_640, 400, 62.44), "34B": (1_038_336, 350, 153.90),
          "70B": (1_720_320, 400, 291.42)}


def card(tonnes: float) -> float:
    """As the model card prints a figure: cut to two decimals."""
    return math.floor(tonnes * 100 + 1e-9) / 100


@pytest.mark.parametrize("model", LLAMA2)
def test_each_llama2_row_of_the_model_card(api, model):
    hours, watts, tonnes = LLAMA2[model]
    answer = api.ok(ENERGY, {"gpu_hours": hours, "power_watts": watts, **MODEL_CARD})
    assert card(answer["co2e_tonnes"]) == tonnes
    assert answer["grid_g_per_kwh"] == 385 and answer["grid_region"] == "us-average"
    assert answer["power_source"] == "given" and answer["pue_source"] == "given"


def test_llama2_total_is_539_tonnes(api):
    total = sum(api.ok(ENERGY, {"gpu_hours": h, "power_watts": w, **MODEL_CARD})["co2e_tonnes"]
                for h, w, _ in LLAMA2.values())
    assert card(total) == 539.00


def test_the_a100s_board_power_is_the_400_w_the_model_card_uses(api):
    """The 7B row from the catalogue: an A100-80GB at its board power (utilisation 1, the default)."""
    answer = api.ok(ENERGY, {"gpu_hours": 184_320, "gpu": "a100-80gb", **MODEL_CARD})
    assert answer["power_watts_per_gpu"] == 400 and answer["board_power_watts"] == 400
    assert answer["power_utilization"] == 1 and answer["power_source"].startswith("catalogue: a100-80gb")
    assert card(answer["co2e_tonnes"]) == 31.22
    assert answer["defaults_applied"]["power_utilization"] == 1.0


def test_bloom_433196_kwh_and_24_7_tonnes_in_france(api):
    answer = api.ok(ENERGY, {"gpu_hours": 1_082_990, "power_watts": 400, "pue": 1, "region": "france"})
    assert answer["energy_kwh"] == pytest.approx(433_196, abs=0.5)
    assert answer["gpu_energy_kwh"] == answer["energy_kwh"]
    assert round(answer["co2e_tonnes"], 1) == 24.7 and answer["grid_g_per_kwh"] == 57


def test_seconds_times_gpus_and_a_given_intensity(api):
    """A day on 8 GPUs at 500 W: 192 GPU-hours, 96 kWh, x PUE 1.25 = 120 kWh; at 100 g/kWh, 12 kg."""
    answer = api.ok(ENERGY, {"seconds": 86_400, "num_gpus": 8, "power_watts": 500, "pue": 1.25,
                             "grid_g_per_kwh": 100})
    assert answer["gpu_hours"] == pytest.approx(192)
    assert answer["energy_kwh"] == pytest.approx(120) and answer["co2e_kg"] == pytest.approx(12)
    assert answer["grid_region"] is None and answer["grid_source"] == "given"


def test_defaults_are_the_model_cards_and_stated(api):
    """10 GPU-hours on an H100 SXM (700 W board power): 7 kWh x 1.1 = 7.7 kWh, x 385 g = 2,964.5 g."""
    answer = api.ok(ENERGY, {"gpu_hours": 10, "gpu": "h100-sxm"})
    assert answer["energy_kwh"] == pytest.approx(7.7) and answer["co2e_kg"] == pytest.approx(2.9645)
    applied = answer["defaults_applied"]
    assert applied["pue"] == 1.1 and applied["region"] == "us-average" and applied["power_utilization"] == 1
    assert "Touvron" in answer["pue_source"] and "Wu et al. 2022" in answer["grid_source"]


def test_time_calculator_energy_by_hand(api):
    """FLOPs for exactly one hour on 4 H100s at MFU 0.5 (989.5 TFLOP/s bf16 dense x 4 x 0.5 x 3600 s):
    4 GPU-hours x 700 W x 0.5 = 1.4 kWh, x PUE 1.2 = 1.68 kWh; on the French grid, 1.68 x 57 = 95.76 g."""
    flops = 989.5e12 * 4 * 0.5 * 3600
    body = {"flops": flops, "gpu": "h100-sxm", "num_gpus": 4, "mfu": 0.5}
    e = api.ok(TIME, body | {"power_utilization": 0.5, "pue": 1.2, "region": "france"})["energy"]
    assert e["gpu_hours"] == pytest.approx(4) and e["power_watts_per_gpu"] == 350
    assert e["energy_kwh"] == pytest.approx(1.68) and e["co2e_kg"] == pytest.approx(0.09576)
    answer = api.ok(TIME, body)  # the defaults: 4 x 700 W x 1.1 = 3.08 kWh, x 385 g = 1,185.8 g
    assert answer["energy"]["energy_kwh"] == pytest.approx(3.08)
    assert answer["energy"]["co2e_kg"] == pytest.approx(1.1858)
    assert {"pue", "region", "power_utilization", "power_watts"} <= set(answer["defaults_applied"])


def test_time_without_a_board_power_answers_without_energy(api):
    """No vendor sheet gives a TPU v5e's power: the time is answered, energy is null, not guessed."""
    answer = api.ok(TIME, {"params": 1e9, "tokens": 1e10, "gpu": "tpu-v5e"})
    assert answer["days"] > 0 and answer["energy"] is None
    given = api.ok(TIME, {"params": 1e9, "tokens": 1e10, "gpu": "tpu-v5e", "power_watts": 200})
    assert given["energy"]["power_watts_per_gpu"] == 200


@pytest.mark.parametrize("body,field", [
    ({"gpu_hours": 1, "power_watts": -100}, "power_watts"),
    ({"gpu_hours": 1, "power_watts": 0}, "power_watts"),
    ({"gpu_hours": 1, "power_watts": 100, "pue": 0.9}, "pue"),
    ({"gpu_hours": 1, "gpu": "h100-sxm", "power_utilization": 0}, "power_utilization"),
    ({"gpu_hours": 1, "gpu": "h100-sxm", "power_utilization": 1.5}, "power_utilization"),
    ({"gpu_hours": 1, "power_watts": 100, "power_utilization": 0.5}, "power_utilization"),
    ({"gpu_hours": 1, "power_watts": 100, "region": "world", "grid_g_per_kwh": 50}, "grid_g_per_kwh"),
    ({"gpu_hours": 1, "power_watts": 100, "grid_g_per_kwh": -1}, "grid_g_per_kwh"),
    ({"gpu_hours": 1, "power_watts": 100, "region": "france", "grid_g_per_kwh": 50}, "grid_g_per_kwh"),
    ({"gpu_hours": 1}, "power_watts"),
    ({"gpu_hours": 1, "gpu": "tpu-v5e"}, "power_watts"),
    ({"power_watts": 100}, "gpu_hours"),
    ({"gpu_hours": 1, "seconds": 3600, "power_watts": 100}, "gpu_hours"),
    ({"gpu_hours": -1, "power_watts": 100}, "gpu_hours"),
])
def test_bad_input_is_422_naming_the_field(api, body, field):
    assert_names_field(api.post(ENERGY, body), field)


def test_a_default_beside_what_replaces_it_is_no_conflict(api):
    """A page's form sends every default: utilisation 1 beside a power, the default region beside a
    number. Neither changes the answer: 10 GPU-hours x 250 W x PUE 1.1 = 2.75 kWh; x 200 g = 550 g."""
    answer = api.ok(ENERGY, {"gpu_hours": 10, "power_watts": 250, "power_utilization": 1,
                             "region": "us-average", "grid_g_per_kwh": 200})
    assert answer["energy_kwh"] == pytest.approx(2.75) and answer["co2e_kg"] == pytest.approx(0.55)
    assert answer["grid_region"] is None and answer["power_source"] == "given"


def test_an_unknown_region_lists_the_known_ones(api):
    mars = {"gpu_hours": 1, "power_watts": 100, "region": "mars"}
    body = assert_names_field(api.post(ENERGY, mars), "region")
    assert all(name in body["message"] for name in ("us-average", "france", "world"))


def test_the_time_calculator_refuses_bad_energy_inputs_too(api):
    body = {"params": 1e9, "tokens": 1e10, "gpu": "h100-sxm"}
    assert_names_field(api.post(TIME, body | {"pue": 0.5}), "pue")
    assert_names_field(api.post(TIME, body | {"power_watts": -5}), "power_watts")


def sustained_step(watts: float):
    """A train_step job's result whose sustained run averaged `watts` on this box's device."""
    held = minimal(Sustained,
                   seconds=10.0, average_power_watts=watts, energy_joules=watts * 10)
    return result_for("train_step", environment=here(), precision="bf16_autocast", model="gpt2",
                      sustained=held)


def test_measured_power_is_the_mean_of_the_sustained_train_steps(make_api):
    """Two sustained runs at 600 and 700 W: 650 W; 10 GPU-hours at PUE 1 are 6.5 kWh."""
    api = make_api()
    store: Store = api.app.state.store
    empty = assert_names_field(api.post(ENERGY, {"gpu_hours": 10, "power_watts": "measured"}), "power_watts")
    assert "train_step" in empty["message"] and "sustain_s" in empty["message"]
    first, second = finished(store, sustained_step(600)), finished(store, sustained_step(700))
    finished(store, result_for("train_step", environment=here(), precision="fp32", model="gpt2"))  # no power
    answer = api.ok(ENERGY, {"gpu_hours": 10, "power_watts": "measured", "pue": 1})
    assert answer["power_watts_per_gpu"] == pytest.approx(650) and answer["energy_kwh"] == pytest.approx(6.5)
    assert f"jobs {second}, {first}" in answer["power_source"]
    # This box is no H100 SXM: its measured power does not stand for one.
    assert_names_field(api.post(TIME, {"params": 1e9, "tokens": 1e10, "gpu": "h100-sxm",
                                       "power_watts": "measured"}), "power_watts")


def test_the_catalogue_lists_board_power_with_its_source(api):
    """The H100 SXM's datasheet TDP is up to 700 W; the A100 SXM's 400 W (the Llama 2 card's figure)."""
    parts = {g["id"]: g for g in api.get("/api/v1/hardware").json()["data"]}
    assert parts["h100-sxm"]["board_power_watts"] == 700 and parts["a100-80gb"]["board_power_watts"] == 400
    for g in parts.values():
        assert (g["board_power_watts"] is None) == (g["board_power_source"] is None), g["id"]


def test_tally_calc_energy_gives_the_7b_row_and_refuses_a_pue_below_1(capsys):
    """`tally calc energy`, derived from the route table, answers as the API does."""
    from app.cli import main

    assert main(["calc", "energy", "--gpu-hours", "184320", "--power-watts", "400", "--pue", "1.1",
                 "--region", "us-average", "--compact"]) == 0
    assert card(json.loads(capsys.readouterr().out)["co2e_tonnes"]) == 31.22
    assert main(["calc", "energy", "--gpu-hours", "10", "--power-watts", "100", "--pue", "0.9"]) == 2
    assert json.loads(capsys.readouterr().err)["detail"][0]["field"] == "pue"


def test_docs_state_the_time_examples_energy(api):
    """The figures docs/api/time.md quotes for the course's 70B run are the API's."""
    doc = (ROOT / "docs" / "api" / "time.md").read_text()
    course = {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm", "num_gpus": 1024, "mfu": 0.5}
    e = api.ok(TIME, course)["energy"]
    assert f"{e['gpu_hours']:,.0f}\nGPU-hours" in doc or f"{e['gpu_hours']:,.0f} GPU-hours" in doc
    assert f"{e['energy_mwh']:,.1f} MWh" in doc and f"{e['co2e_tonnes']:,.1f} tCO2eq" in doc


def test_the_time_page_shows_energy_and_co2e_beside_days(api):
    """1 hour on 4 H100s (as above; 6 x 1.1874e9 x 1e9 = 989.5e12 x 4 x 0.5 x 3600 FLOPs) at the page's
    inputs: 4 x 700 W x 0.5 x 1.2 = 1.68 kWh; x 57 g = 95.8 g."""
    page = api.get("/ui/time?params=1.1874e9&tokens=1e9&gpu=h100-sxm&num_gpus=4&mfu=0.5&power_utilization=0.5"
                   "&pue=1.2&region=france").text
    assert 'data-testid="energy">1.68 kWh<' in page and 'data-testid="co2e">95.8 g<' in page
    tpu = api.get("/ui/time?params=1e9&tokens=1e10&gpu=tpu-v5e").text
    assert 'data-testid="energy"' not in tpu and "no board power for this GPU" in tpu
