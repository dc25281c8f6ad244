"""Calibration profiles from stored runs (app/measured/profile.py), their API (build, list, export,
import) and the calibrated train step (POST /api/v1/time/step), on results written straight into the
store with known numbers: a matmul line t = alpha + FLOPs / rate, and train steps timed by step.py's
model with chosen coefficients, which the fit must then find again."""

import dataclasses

import pytest

from app.accounting import flops
from app.accounting.calibration import lsq, step, surface
from app.accounting.calibration.profile import MatmulSample
from app.inputs.schemas import TransformerConfigIn
from app.probes import campaign
from app.probes.results import Contention
from tests.support.api import assert_names_field
from tests.support.bench_jobs import finished, here, matmul, matmul_point, stats
from tests.support.results import minimal, result_for

ALPHA_S, RATE = 20e-6, 100e9  # the synthetic device: 20 us a call, 100 GFLOP/s
PER_OP, PER_ACT, PER_OPT = 12e-6, 5e-10, 1e-10


def line(m: int, k: int, n: int) -> float:
    return ALPHA_S + 2 * m * k * n / RATE


def store_matmul(store, environment=None) -> int:
    points = [
        matmul_point(m, k, n, "float32", line(m, k, n), line(m, k, n))
        for m, k, n in campaign.MATMUL_SHAPES["cpu"]
    ]
    return finished(store, matmul(points, environment))


def synthetic_step(params: dict) -> float:
    """step.py's model at the chosen coefficients, on the synthetic matmul line."""
    cfg = TransformerConfigIn(**params["model"]).to_engine()
    c = step.counts(
        cfg, batch_size=params["batch_size"], seq_len=params["seq_len"], precision="fp32", optimizer="adamw"
    )
    surf = surface.fit(
        [
            MatmulSample("float32", m, k, n, line(m, k, n), 0.0, (1,))
            for m, k, n in campaign.MATMUL_SHAPES["cpu"]
        ],
        "float32",
    )
    # No attention runs in the store: the core is timed as its bare GEMMs.
    known = sum(surf.seconds(g.m, g.k, g.n, g.groups) for g in c.gemms) + sum(
        a.gemm_seconds(surf, backward=True) for a in c.attention
    )
    return known + c.ops * PER_OP + c.activation_bytes * PER_ACT + c.optimizer_bytes * PER_OPT


def store_steps(store, jobs: list[dict], *, timed=None) -> list[int]:
    """Train steps of `jobs` timed by `timed` (params -> seconds; synthetic_step by default)."""
    ids = []
    for job in jobs:
        p = job["params"]
        result = result_for(
            "train_step",
            environment=here(),
            model="custom",
            precision="fp32",
            mode="full",
            batch_size=p["batch_size"],
            seq_len=p["seq_len"],
            step=stats((timed or synthetic_step)(p)),
            flops_per_step=flops.transformer(
                TransformerConfigIn(**p["model"]).to_engine(), p["batch_size"], p["seq_len"]
            ).step.total,
        )
        ids.append(finished(store, result, p))
    return ids


def test_least_squares_finds_known_non_negative_coefficients():
    rows = [[1.0, 2.0, 0.5], [2.0, 1.0, 0.1], [0.3, 0.7, 2.0], [1.5, 0.2, 0.9]]
    truth = [3.0, 0.5, 2.0]
    assert lsq.nonnegative(
        rows, [sum(a * b for a, b in zip(r, truth, strict=True)) for r in rows]
    ) == pytest.approx(truth)
    # A target a positive coefficient cannot reach holds that coefficient at zero.
    assert lsq.nonnegative([[1.0, 1.0], [1.0, 2.0]], [1.0, 0.0])[1] == 0.0


def test_the_surface_of_a_straight_line_is_the_line_without_its_call_cost():
    samples = [
        MatmulSample("float32", m, k, n, line(m, k, n), 0.0, (1,))
        for m, k, n in campaign.MATMUL_SHAPES["cpu"]
    ]
    surf = surface.fit(samples, "float32")
    assert surf.alpha_s == pytest.approx(ALPHA_S, rel=1e-6) and surf.rate_flop_per_s == pytest.approx(
        RATE, rel=1e-6
    )
    # A shape between the measured ones: the line's work, alpha off.
    assert surf.seconds(500, 100, 700) == pytest.approx(2 * 500 * 100 * 700 / RATE, rel=1e-6)
    assert surf.seconds(500, 100, 700, groups=3) == pytest.approx(3 * surf.seconds(500, 100, 700))


def test_the_profile_fits_the_step_overheads_back_and_predicts_a_held_out_step(make_api):
    api = make_api()
    store = api.app.state.store
    mm = store_matmul(store)
    steps = store_steps(store, campaign.train_steps("cpu"))
    built = api.post("/api/v1/calibration/profiles", {})
    assert built.status_code == 201, built.text
    profile = built.json()
    fit = profile["train_step"][0]
    assert fit["jobs"] == steps and fit["rms_relative_error"] < 1e-6
    assert (
        fit["seconds_per_op"],
        fit["seconds_per_activation_byte"],
        fit["seconds_per_optimizer_byte"],
    ) == pytest.approx((PER_OP, PER_ACT, PER_OPT), rel=1e-4)
    assert profile["version"] == 1 and profile["left_out"] == [] and profile["flags"] == []
    held = campaign.held_out("cpu")[4]["params"]
    answer = api.ok(
        "/api/v1/time/step",
        {k: held[k] for k in ("model", "batch_size", "seq_len")} | {"calibration": profile["id"]},
    )
    calibrated = answer["calibrated"]
    assert calibrated["seconds"] == pytest.approx(synthetic_step(held), rel=1e-6)
    assert sum(
        calibrated[k]
        for k in (
            "gemm_seconds",
            "attention_seconds",
            "op_seconds",
            "activation_seconds",
            "optimizer_seconds",
        )
    ) == pytest.approx(calibrated["seconds"])
    assert f"matmul jobs {mm}" in calibrated["sources"][0] and "train_step jobs" in calibrated["sources"][2]
    assert "as bare GEMMs" in calibrated["sources"][1]  # no attention runs in this store
    assert answer["profile"]["id"] == profile["id"]
    # By device model: the newest version.
    by_name = api.ok("/api/v1/time/step", {"model": held["model"], "calibration": profile["device_model"]})
    assert by_name["profile"]["version"] == 1


def test_a_contended_run_is_left_out_and_said_so_or_flagged_when_no_run_was_alone(make_api):
    api = make_api()
    store = api.app.state.store
    noisy = minimal(Contention, quiet=False, reasons=["a compiler ran"])
    busy = dataclasses.replace(here(), contention=noisy)
    contended = store_matmul(store, busy)
    flagged = api.post("/api/v1/calibration/profiles").json()
    assert flagged["left_out"] == [f"matmul job {contended}: a compiler ran"]
    said = [f for f in flagged["flags"] if f.startswith("matmul: no run was measured alone")]
    assert len(said) == 1 and str(contended) in said[0]
    quiet = store_matmul(store)
    profile = api.post("/api/v1/calibration/profiles").json()
    assert {j for s in profile["matmul"] for j in s["jobs"]} == {quiet}
    assert profile["left_out"] == [f"matmul job {contended}: a compiler ran"] and profile["flags"] == []


def test_no_matmul_run_at_all_is_refused_naming_device_model(make_api):
    api = make_api()
    assert_names_field(api.post("/api/v1/calibration/profiles"), "device_model")
    assert_names_field(api.post("/api/v1/calibration/profiles", params={"device_model": "NVIDIA B200"}),
                       "device_model")


def test_runs_that_disagree_are_flagged_and_the_flag_travels_with_every_answer(make_api):
    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    slow = [
        matmul_point(m, k, n, "float32", 2 * line(m, k, n), 2 * line(m, k, n))
        for m, k, n in campaign.MATMUL_SHAPES["cpu"]
    ]
    finished(store, matmul(slow))
    store_steps(store, campaign.train_steps("cpu"))
    profile = api.post("/api/v1/calibration/profiles", {}).json()
    assert any("spread 67%" in flag for flag in profile["flags"]), profile["flags"]
    answer = api.ok(
        "/api/v1/time/step", {"model": "gpt2", "batch_size": 1, "seq_len": 64, "calibration": profile["id"]}
    )
    assert answer["flags"] == profile["flags"] and set(profile["flags"]) <= set(
        answer["calibrated"]["sources"]
    )


def test_export_then_import_makes_the_next_version_elsewhere(make_api):
    source, elsewhere = make_api(), make_api()
    store_matmul(source.app.state.store)
    store_steps(source.app.state.store, campaign.train_steps("cpu"))
    first = source.post("/api/v1/calibration/profiles", {}).json()
    exported = source.get(f"/api/v1/calibration/profiles/{first['id']}").json()
    assert exported == first
    imported = elsewhere.post("/api/v1/calibration/import", exported)
    assert imported.status_code == 201, imported.text
    again = elsewhere.post("/api/v1/calibration/import", exported).json()
    assert (imported.json()["version"], again["version"]) == (1, 2)
    assert again["imported_from"] == f"{first['device_model']} version 1, built {first['created_at']}"
    assert again["matmul"] == first["matmul"] and again["train_step"] == first["train_step"]
    listed = elsewhere.get("/api/v1/calibration/profiles").json()
    assert [p["version"] for p in listed] == [2, 1]
    model = {"model": "gpt2", "batch_size": 2, "seq_len": 64}
    assert (
        elsewhere.ok("/api/v1/time/step", model | {"calibration": again["id"]})["calibrated"]["seconds"]
        == source.ok("/api/v1/time/step", model | {"calibration": first["id"]})["calibrated"]["seconds"]
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"matmul": []}, "matmul"),
        (
            {
                "matmul": [
                    {"dtype": "float32", "m": 64, "k": 64, "n": 64, "seconds": -1.0, "spread": 0, "jobs": [1]}
                ]
            },
            "matmul.0.seconds",
        ),
        (
            {
                "matmul": [
                    {"dtype": "float32", "m": 0, "k": 64, "n": 64, "seconds": 1e-3, "spread": 0, "jobs": [1]}
                ]
            },
            "matmul.0.m",
        ),
        ({"datasheet_peak_flop_per_sec": {"float32": 0.0}}, "datasheet_peak_flop_per_sec.float32"),
        ({"device_kind": "tpu"}, "device_kind"),
    ],
)
def test_an_import_no_measurement_could_give_is_refused_naming_the_field(make_api, change, field):
    api = make_api()
    store_matmul(api.app.state.store)
    exported = api.post("/api/v1/calibration/profiles", {}).json()
    assert_names_field(api.post("/api/v1/calibration/import", exported | change), field)


def test_a_calculator_names_calibration_when_the_profile_is_missing_or_for_another_device(make_api):
    api = make_api()
    store_matmul(api.app.state.store)
    profile = api.post("/api/v1/calibration/profiles", {}).json()
    body = {"model": "gpt2", "batch_size": 1, "seq_len": 64}
    assert_names_field(
        api.post("/api/v1/time/step", body | {"calibration": profile["id"] + 5}), "calibration"
    )
    assert_names_field(api.post("/api/v1/time/step", body | {"calibration": "NVIDIA B200"}), "calibration")
    assert_names_field(
        api.post("/api/v1/time/step", body | {"calibration": profile["id"], "gpu": "h100-sxm"}), "calibration"
    )
    # No train_step run measured yet: the calibrated answer cannot time the step's overheads.
    assert_names_field(api.post("/api/v1/time/step", body | {"calibration": profile["id"]}), "calibration")
    assert_names_field(api.post("/api/v1/time/step", body), "gpu")
    assert api.get("/api/v1/calibration/profiles/999").status_code == 404
    # Without calibration, the datasheet answer alone, as before.
    plain = api.ok("/api/v1/time/step", body | {"gpu": "h100-sxm", "precision": "bf16_autocast"})
    assert plain["calibrated"] is None and plain["profile"] is None
    assert plain["datasheet"]["seconds"] == pytest.approx(
        plain["datasheet"]["flops"] / (0.5 * 989e12), rel=0.01
    )


def test_a_burn_ins_sustained_runs_give_the_sustained_ratio_and_power(make_api):
    from app.probes.sustained import Sustained

    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    burst = matmul_point(256, 256, 256, "float32", 1e-3, 1e-3)
    held_matmul = minimal(Sustained, flop_per_sec=0.8 * burst.flop_per_sec, average_power_watts=500.0)
    held_step = minimal(Sustained, seconds_per_iteration=0.125, average_power_watts=520.0)
    step_result = result_for("train_step", environment=here(), step=stats(0.1), sustained=held_step)
    matmul_result = dataclasses.replace(matmul([burst]), sustained=held_matmul)
    burn_in = result_for("burn_in", environment=here(), matmul=matmul_result, train_step=step_result)
    burn = finished(store, burn_in)
    profile = api.post("/api/v1/calibration/profiles").json()
    # The matmul held 0.8 of its burst rate; the step took 0.125 s a step sustained against 0.1 s.
    assert profile["sustained_ratio"]["value"] == pytest.approx(0.8)
    ratio, power = profile["sustained_ratio"], profile["power_watts"]
    assert ratio["jobs"] == [burn] and ratio["spread"] == pytest.approx(0)
    assert power["value"] == pytest.approx(510.0) and power["jobs"] == [burn]
