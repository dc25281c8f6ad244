"""Issue 31, point 5: calibrate this CPU with a short campaign (app/probes/campaign.py), then
predict train steps of six model shapes x three batch sizes the campaign never ran, measure them,
and score both answers of POST /api/v1/time/step against the measurements.

The bound. Five repeated runs of this sweep on this shared two-core box gave a calibrated MAPE of
6.7%, 8.8%, 10.1%, 12.1% and 16.2% (the last two while other test processes ran beside them),
with single points off by up to 47%; the datasheet answer (FLOPs over half the CPU's AVX2 FMA
peak) was off by 38-43% every time. MAPE_BOUND is 1.5x the worst of those, and the calibrated
answer must also beat the datasheet's on the same measurements."""

import pytest

from app.probes import campaign
from tests.calibration import running
from tests.support.bench_jobs import finished

MAPE_BOUND = 0.25


def test_a_calibrated_cpu_predicts_held_out_train_steps_better_than_its_datasheet(make_api):
    api = make_api()
    store = api.app.state.store
    running.run(store, campaign.jobs("cpu"))
    built = api.post("/api/v1/calibration/profiles", {})
    assert built.status_code == 201, built.text
    profile = built.json()
    assert [fit["precision"] for fit in profile["train_step"]] == ["fp32"]
    assert len(profile["train_step"][0]["jobs"]) == len(campaign.STEPS["cpu"])
    rows = []
    for job in campaign.held_out("cpu"):
        p = job["params"]
        assert (p["model"], p["batch_size"], p["seq_len"]) not in campaign.STEPS["cpu"]
        asked = {k: p[k] for k in ("model", "batch_size", "seq_len")} | {"calibration": profile["id"]}
        answer = api.ok("/api/v1/time/step", asked)
        measured = running.measured(job)
        finished(store, measured, p)  # the ledger scores it too
        rows.append((p["model"]["d_model"], p["model"]["n_layers"], p["batch_size"], p["seq_len"],
                     measured.step.median, answer["calibrated"]["seconds"], answer["datasheet"]["seconds"]))
    calibrated = [abs(c / m - 1) for *_, m, c, _ in rows]
    datasheet = [abs(d / m - 1) for *_, m, _, d in rows]
    table = "\n".join(f"d={d} L={n} b={b} s={s}: measured {m * 1e3:.1f} ms, calibrated {c * 1e3:.1f} "
                      f"({c / m - 1:+.0%}), datasheet {ds * 1e3:.1f} ({ds / m - 1:+.0%})"
                      for d, n, b, s, m, c, ds in rows)
    mape, mape_datasheet = sum(calibrated) / len(rows), sum(datasheet) / len(rows)
    print(f"{table}\ncalibrated MAPE {mape:.1%}, datasheet MAPE {mape_datasheet:.1%}")
    assert len(rows) == 18
    assert mape < MAPE_BOUND, table
    assert mape < mape_datasheet, table
    # The accuracy ledger scores the same 18 steps against the profile (its own six never).
    (group,) = api.get("/api/v1/accuracy", params={"probe": "train_step", "mode": "calibrated",
                                                   "metric": "step_seconds"}).json()["groups"]
    assert group["count"] == 18 and group["mape"] == pytest.approx(mape)
