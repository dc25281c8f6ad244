"""The accuracy ledger (app/measured/accuracy.py, GET /api/v1/accuracy, the Accuracy page, `tally
accuracy`): every job's pairs stored once per mode and profile, calibrated ones leave-one-out, and
the errors per probe, metric, device model and mode. Synthetic runs timed by step.py's own model
give calibrated errors of zero; the datasheet's are what FLOPs over half the CPU's peak say."""

import json

import pytest

from app.probes import campaign
from tests.calibration.test_profiles import store_matmul, store_steps, synthetic_step
from tests.support.api import assert_names_field
from tests.support.cli import run_main


def calibrated_api(make_api):
    """An app whose store holds a profile (matmul and the campaign's steps) and three steps run after it."""
    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    fitted = store_steps(store, campaign.train_steps("cpu"))
    profile = api.post("/api/v1/calibration/profiles").json()
    held = store_steps(store, campaign.held_out("cpu")[:3])
    return api, profile, fitted, held


def test_calibrated_pairs_score_only_jobs_the_profile_was_not_fitted_on(make_api):
    api, profile, fitted, held = calibrated_api(make_api)
    report = api.get("/api/v1/accuracy").json()
    calibrated = [p for p in report["points"] if p["mode"] == "calibrated" and p["probe"] == "train_step"]
    assert sorted(p["job_id"] for p in calibrated) == held  # the six it was fitted on never score it
    assert all(p["profile_version"] == profile["version"] for p in calibrated)
    assert max(abs(p["error"]) for p in calibrated) < 1e-6  # the synthetic steps follow the model exactly
    (group,) = [g for g in report["groups"] if g["mode"] == "calibrated" and g["metric"] == "step_seconds"]
    assert (group["count"], group["profile_versions"]) == (3, [profile["version"]])
    datasheet = [p for p in report["points"] if p["mode"] == "datasheet" and p["metric"] == "step_seconds"]
    assert sorted(p["job_id"] for p in datasheet) == sorted(fitted + held)
    for p in datasheet:  # FLOPs over half the peak: far from a step's real time on a CPU
        assert p["predicted"] / p["measured"] - 1 == pytest.approx(p["error"])


def test_pairs_are_stored_once_and_a_later_profile_scores_what_it_was_not_fitted_on(make_api):
    api, first, fitted, held = calibrated_api(make_api)
    added = api.get("/api/v1/accuracy").json()["scored_now"]
    assert added > 0 and api.get("/api/v1/accuracy").json()["scored_now"] == 0
    stored = api.app.state.store.ledger_rows(mode="calibrated")
    assert {r["job_id"] for r in stored} == set(held)
    # Version 2 is fitted on the held-out steps too: they stay scored by version 1 alone.
    second = api.post("/api/v1/calibration/profiles").json()
    assert set(held) <= set(second["train_step"][0]["jobs"])
    assert api.get("/api/v1/accuracy").json()["scored_now"] == 0
    later = store_steps(api.app.state.store, campaign.held_out("cpu")[3:5])
    points = api.get("/api/v1/accuracy", params={"mode": "calibrated"}).json()["points"]
    by_job = {p["job_id"]: p["profile_version"] for p in points if p["probe"] == "train_step"}
    assert by_job == {j: 1 for j in held} | {j: 2 for j in later}


def test_filters_and_refusals(make_api):
    api, *_ = calibrated_api(make_api)
    only = api.get("/api/v1/accuracy", params={"mode": "calibrated", "probe": "train_step"}).json()
    assert {g["mode"] for g in only["groups"]} == {"calibrated"}
    assert_names_field(api.get("/api/v1/accuracy", params={"probe": "nope"}), "probe")
    assert_names_field(api.get("/api/v1/accuracy", params={"mode": "guessed"}), "mode")
    assert api.get("/api/v1/accuracy", params={"device_model": "NVIDIA B200"}).json()["groups"] == []


def test_the_accuracy_and_calibration_pages_show_the_ledger_and_the_profile(make_api):
    api, profile, _, held = calibrated_api(make_api)
    page = api.get("/accuracy").text
    assert 'data-testid="accuracy-table"' in page and "predicted_measured" in page
    assert "step_seconds" in page and "calibrated (v1)" in page
    calibration = api.get("/calibration").text
    assert f"Profile #{profile['id']}" in calibration and 'data-testid="profile-figures"' in calibration
    started = api.post("/ui/calibration/start", data={"token": ""})
    assert started.status_code == 200 and started.headers["HX-Redirect"].startswith("/calibration")
    assert api.get("/api/v1/jobs", params={"probe": "train_step", "status": "queued"}).json()["count"] == 6


def test_tally_accuracy_prints_the_ledger_of_this_boxs_database(make_api, capsys, monkeypatch, tmp_path):
    api, *_ = calibrated_api(make_api)
    database = api.app.state.settings.database_path
    monkeypatch.setenv("TALLY_DATABASE_PATH", str(database))
    from app.config import get_settings

    get_settings.cache_clear()
    try:
        status, out, _ = run_main(capsys, "accuracy", "--mode", "calibrated")
        assert status == 0 and "step_seconds" in out and "calibrated v1" in out
        status, out, _ = run_main(capsys, "accuracy", "--output", "json")
        assert status == 0 and {g["mode"] for g in json.loads(out)["groups"]} == {"datasheet", "calibrated"}
    finally:
        get_settings.cache_clear()
    assert synthetic_step  # the steps above were timed by it


def test_readers_scoring_the_same_new_jobs_at_once_store_each_pair_once(make_api):
    """GET /accuracy fills the ledger as it reads; four readers at once over a new job and a new
    profile still leave one row per pair."""
    import threading

    from app.measured import accuracy

    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    store_steps(store, campaign.train_steps("cpu"))
    assert api.post("/api/v1/calibration/profiles").status_code == 201
    store_steps(store, campaign.held_out("cpu")[:2])
    start, added = threading.Barrier(4), []

    def read() -> None:
        start.wait()
        added.append(accuracy.refresh(store))

    readers = [threading.Thread(target=read) for _ in range(4)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    rows = store.ledger_rows()
    keys = [(r["job_id"], r["mode"], r["profile_id"], r["metric"], r["detail"]) for r in rows]
    assert len(keys) == len(set(keys)) == sum(added) > 0
    assert accuracy.refresh(store) == 0  # nothing new to score


def test_a_gpu_steps_board_watts_stand_beside_the_power_an_energy_answer_assumes(make_api):
    from app.accounting import hardware
    from app.probes.energy import Energy
    from app.probes.results import Environment
    from tests.support.bench_jobs import finished, stats
    from tests.support.results import minimal, result_for

    api = make_api()
    h200 = minimal(Environment, device="cuda", device_name="NVIDIA H200", catalogue_id="h200",
                   torch_version="2.x")
    drawn = stats(0.1)
    drawn.energy = minimal(Energy, joules=60.0, seconds=1.0, watts=600.0, iterations=10,
                           seconds_per_iteration=0.1)
    job = finished(api.app.state.store, result_for("train_step", environment=h200, step=drawn, mode="full",
                                                   model="gpt2", batch_size=1, seq_len=64))
    points = api.get("/api/v1/accuracy", params={"metric": "board_watts"}).json()["points"]
    (pair,) = [p for p in points if p["job_id"] == job]
    board = hardware.gpu("h200").board_power_watts
    assert (pair["kind"], pair["mode"], pair["measured"]) == ("energy", "datasheet", 600.0)
    assert pair["predicted"] == board and pair["error"] == pytest.approx(board / 600 - 1)
