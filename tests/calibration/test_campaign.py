"""A calibration campaign end to end on this CPU: POST /api/v1/calibration/campaigns queues the
probes a profile needs, a dispatcher runs them in real children, and the campaign builds the profile
once they have all ended, every figure naming its jobs."""

from app.jobs.dispatcher import Dispatcher
from app.probes import campaign
from tests.support.api import assert_names_field


def test_a_campaign_queues_its_probes_and_builds_the_profile_when_they_end(make_api):
    api = make_api()
    started = api.post("/api/v1/calibration/campaigns", {})
    assert started.status_code == 202, started.text
    out = started.json()
    queued = [api.get(f"/api/v1/jobs/{i}").json() for i in out["jobs"]]
    assert [j["probe"] for j in queued] == [j["probe"] for j in campaign.jobs("cpu")]
    assert out["status"] == "running" and out["profile_id"] is None
    dispatcher = Dispatcher(api.app.state.store, "calibrate")
    while dispatcher.run_once():
        pass
    done = api.get(f"/api/v1/calibration/campaigns/{out['id']}").json()
    failed = [
        j for j in (api.get(f"/api/v1/jobs/{i}").json() for i in out["jobs"]) if j["status"] != "succeeded"
    ]
    assert failed == [] and done["status"] == "built", (done, failed)
    again = api.get(f"/api/v1/calibration/campaigns/{out['id']}").json()
    assert again["profile_id"] == done["profile_id"]  # built once
    profile = api.get(f"/api/v1/calibration/profiles/{done['profile_id']}").json()
    ids = set(out["jobs"])
    assert {j for s in profile["matmul"] for j in s["jobs"]} <= ids
    for name in (
        "copy_bytes_per_s",
        "host_to_device_bytes_per_s",
        "device_to_host_bytes_per_s",
        "launch_eager_s",
    ):
        assert profile[name] is not None and set(profile[name]["jobs"]) <= ids, name
    assert set(profile["train_step"][0]["jobs"]) <= ids and len(profile["train_step"][0]["jobs"]) >= 3
    assert profile["attention"] and {j for a in profile["attention"] for j in a["jobs"]} <= ids
    assert [p["id"] for p in api.get("/api/v1/calibration/profiles").json()] == [done["profile_id"]]


def test_a_campaign_refuses_a_model_no_device_is(make_api):
    api = make_api()
    assert_names_field(api.post("/api/v1/calibration/campaigns", {"gpu_model": "b200"}), "gpu_model")
    assert_names_field(
        api.post("/api/v1/calibration/campaigns", {"gpu_model": "b200", "gpu": 0}), "gpu_model"
    )
    assert api.get("/api/v1/calibration/campaigns/7").status_code == 404
