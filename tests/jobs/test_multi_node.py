"""Jobs across boxes, on both databases: one dispatcher per "box" (its own TALLY_BOX_NAME, its own
fleet device, its own leases) gathers a collectives job all or none, starts its ranks with
torch.distributed's elastic launcher (c10d rendezvous at the first box's published address and
port, gloo on the CPU), and the box that holds rank 0 writes one result: every link measured
alone beside the hierarchical prediction. A rank that fails, or a box killed mid-run, ends the job
on every box with that box's error; a box whose peers never come leaves, its device freed."""

import signal
import subprocess
import sys
import threading
import time

import pytest

from app.device import fleet_device
from app.jobs.dispatcher import Dispatcher
from tests.support import ROOT, pg, procs
from tests.support.api import assert_names_field
from tests.support.waiting import wait_for

# Two sizes, two collectives, few runs: seconds over four gloo processes on two cores.
PARAMS = {
    "device": "cpu",
    "sizes_bytes": [4096, 262144],
    "collectives": ["all_reduce", "all_gather"],
    "iterations": 3,
    "warmup_iterations": 1,
}


def boxes(store, names: list[str], **kwargs) -> list[Dispatcher]:
    """A dispatcher per box, each registered in the fleet (its CPU), reaching the others on loopback."""
    made = [
        Dispatcher(
            store,
            f"{name}:1:cpu",
            host=name,
            fleet_device=fleet_device(name, None),
            address="127.0.0.1",
            poll_s=0.05,
            **kwargs,
        )
        for name in names
    ]
    for d in made:
        store.register(d.fleet_device)
    return made


def run_each_once(dispatchers: list[Dispatcher]) -> list[bool]:
    """Every box's run_once at the same time, as their own loops would; what each returned."""
    ran = [False] * len(dispatchers)

    def one(i: int) -> None:
        ran[i] = dispatchers[i].run_once()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(dispatchers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a box's dispatcher did not come back"
    return ran


def test_a_job_across_two_boxes_runs_once_on_each_and_sets_each_link_beside_the_prediction(store):
    a, b = boxes(store, ["box-a", "box-b"])
    job = store.submit(probe="collectives", params=PARAMS, timeout_s=300, limit=10, device="cpu", nodes=2)
    assert store.claim(worker_id="x", host="box-a") is None  # never one box's alone
    assert run_each_once([a, b]) == [True, True]
    done = store.get(job.id)
    assert done.status == "succeeded", done.error
    assert done.attempts == 1 and store.held_leases() == []
    assert sorted((m.node, m.status) for m in done.members) == [(0, "done"), (1, "done")]
    assert {m.host for m in done.members} == {"box-a", "box-b"}
    r = done.result
    assert r.ranks == 4 and r.backend == "gloo" and r.check_passed  # 2 boxes x 2 gloo ranks, values exact
    s = r.spanning
    assert (s.nodes, s.ranks_per_node, sorted(s.boxes)) == (2, 2, ["box-a", "box-b"])
    assert sorted(n.boxes[0] for n in s.per_node) == ["box-a", "box-b"] and all(
        n.ranks == 2 for n in s.per_node
    )
    (link,) = s.per_link
    assert sorted(link.boxes) == ["box-a", "box-b"] and link.ranks == 2
    assert [p.size_bytes for p in link.points] == PARAMS["sizes_bytes"]
    # Every point of the world's sweep beside its predictions from the parts, errors as defined.
    assert [(p.collective, p.size_bytes) for p in s.points] == [
        (p.collective, p.size_bytes) for p in r.points
    ]
    for spanned, point in zip(s.points, r.points, strict=True):
        assert spanned.measured_seconds == point.time.median
        assert spanned.hierarchical_error == pytest.approx(
            spanned.hierarchical_seconds / point.time.median - 1
        )
        assert spanned.flat_error == pytest.approx(spanned.flat_seconds / point.time.median - 1)
        assert spanned.catalogue_seconds is None and s.catalogue is None  # a CPU: no catalogue line
    assert "2 boxes (" in r.assumptions[-1] and "c10d rendezvous" in r.assumptions[-1]


def test_boxes_gather_all_or_none_and_one_whose_peers_never_come_leaves_its_device_free(store):
    a, b, c = boxes(store, ["box-1", "box-2", "box-3"], gather_wait_s=1.0)
    job = store.submit(
        probe="collectives",
        params=PARAMS | {"collectives": ["all_reduce"]},
        timeout_s=300,
        limit=10,
        device="cpu",
        nodes=3,
    )
    # Two boxes of the three it needs: both join, wait their bound, and leave; nothing ran.
    assert run_each_once([a, b]) == [True, True]
    waited = store.get(job.id)
    assert waited.status == "queued" and waited.attempts == 0 and store.members(job.id) == []
    assert store.held_leases() == []  # their devices are free again
    # A one-box job is not held up by it meanwhile.
    other = store.submit(
        probe="collectives",
        params=PARAMS | {"collectives": ["broadcast"]},
        timeout_s=300,
        limit=10,
        device="cpu",
    )
    assert a.run_once() and store.get(other.id).status == "succeeded"
    assert run_each_once([a, b, c]) == [True, True, True]
    done = store.get(job.id)
    assert done.status == "succeeded", done.error
    assert sorted(m.node for m in done.members) == [0, 1, 2] and done.result.ranks == 6
    assert len(done.result.spanning.per_link) == 3  # every pair of boxes: 1-2, 1-3, 2-3


def test_a_rank_that_fails_ends_the_job_on_every_box_with_its_boxs_error(store):
    dispatchers = boxes(store, ["box-a", "box-b"], child_env={"TALLY_DIST_FAIL_RANK": "3"})
    job = store.submit(probe="collectives", params=PARAMS, timeout_s=300, limit=10, device="cpu", nodes=2)
    run_each_once(dispatchers)
    ended = store.get(job.id)
    assert ended.status == "failed" and ended.error["type"] == "NodeFailed", ended.error
    culprit = ended.error["detail"]["box"]
    # The rank's own words, from the box that holds it (the elastic launcher's global rank 3).
    assert f"rank 3 on {culprit}: RuntimeError: rank 3 failed on purpose" in ended.error["message"]
    statuses = {m.host: m.status for m in ended.members}
    assert statuses[culprit] == "failed" and set(statuses.values()) <= {"failed", "stopped"}
    assert store.held_leases() == []


def test_the_api_takes_nodes_for_a_probe_that_spans_boxes_and_names_what_it_refuses(make_api):
    api = make_api(embedded_worker=False)
    store = api.app.state.store
    for name in ("box-a", "box-b"):
        store.register(fleet_device(name, None))
    made = api.post("/api/v1/jobs", {"probe": "collectives", "params": PARAMS, "nodes": 2})
    assert made.status_code == 202, made.text
    assert made.json()["nodes"] == 2 and made.json()["boxes"] == [] and made.json()["device"] == "cpu"
    assert_names_field(api.post("/api/v1/jobs", {"probe": "matmul", "nodes": 2}), "nodes")
    assert_names_field(api.post("/api/v1/jobs", {"probe": "collectives", "nodes": 3}), "nodes")
    assert_names_field(
        api.post("/api/v1/jobs", {"probe": "collectives", "nodes": 2, "host": "box-a"}), "host"
    )
    assert_names_field(api.post("/api/v1/jobs", {"probe": "collectives", "nodes": 2, "gpu": 0}), "gpu")


# The workers' own state: nothing of the test process's environment but the path to the code.
ENV = {
    "PATH": "/usr/bin:/bin",
    "PYTHONPATH": str(ROOT),
    "TALLY_LOG_LEVEL": "info",
    "TALLY_STALE_AFTER_S": "3",
    "TALLY_NODE_ADDRESS": "127.0.0.1",
}


def worker(tmp_path, database: str, box: str) -> subprocess.Popen:
    """`tally worker` as box `box` (TALLY_BOX_NAME), its log in tmp_path/<box>.log."""
    with open(tmp_path / f"{box}.log", "a") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--database", database],
            cwd=tmp_path,
            env=ENV | {"TALLY_BOX_NAME": box},
            stderr=log,
        )


@pytest.mark.postgres
def test_worker_processes_as_boxes_run_a_job_across_them_and_a_killed_box_ends_it_everywhere(
    make_api, pg_server, tmp_path
):
    """Two `tally worker` processes on one PostgreSQL, each its own box: a gloo job across both
    succeeds and shows on the job's and the fleet's pages; then one box is SIGKILLed mid-run, and
    the other ends the job as BoxLost naming it, within the stale bound, no rank left behind."""
    url = pg.new_database(pg_server)
    api = make_api(embedded_worker=False, database_url=url)
    store = api.app.state.store
    workers = {box: worker(tmp_path, url, box) for box in ("box-1", "box-2")}
    logs = lambda: "\n".join((tmp_path / f"{b}.log").read_text()[-3000:] for b in workers)  # noqa: E731
    try:
        wait_for(
            lambda: len({d.host for d in store.devices()}) == 2, what="both boxes in the fleet", context=logs
        )
        made = api.post("/api/v1/jobs", {"probe": "collectives", "params": PARAMS, "nodes": 2})
        assert made.status_code == 202, made.text
        job_id = made.json()["id"]
        done = wait_for(
            lambda: (j := store.get(job_id)).terminal and j, timeout=180, what="the job to end", context=logs
        )
        assert done.status == "succeeded", done.error

        # The box without rank 0 may still be tearing its part down when the other writes the result.
        def settled() -> dict | None:
            job = api.get(f"/api/v1/jobs/{job_id}").json()
            return job if all(b["status"] != "running" for b in job["boxes"]) else None

        out = wait_for(settled, what="both parts ended", context=logs)
        assert sorted((b["box"], b["status"]) for b in out["boxes"]) == [("box-1", "done"), ("box-2", "done")]
        page = api.get(f"/benchmarks/jobs/{job_id}").text
        assert "Across 2 boxes" in page and "box-1" in page and "box-2" in page and "hierarchical" in page
        fleet_page = api.get("/fleet").text
        assert 'data-device="box-1:cpu"' in fleet_page and 'data-device="box-2:cpu"' in fleet_page
        assert (
            f'data-job="{job_id}"' in fleet_page and "2: box-" in fleet_page
        )  # its row among jobs across boxes

        # A longer job, and box-2 killed once both boxes run their parts.
        long = PARAMS | {"sizes_bytes": [2**20] * 4, "iterations": 400}
        job_id = api.post("/api/v1/jobs", {"probe": "collectives", "params": long, "nodes": 2}).json()["id"]
        wait_for(
            lambda: (
                (j := store.get(job_id)).status == "running"
                and j.members
                and all(m.status == "running" for m in j.members)
            ),
            timeout=60,
            what="both parts running",
            context=logs,
        )
        wait_for(lambda: procs.children(workers["box-2"].pid), what="box-2's child")
        workers["box-2"].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        workers["box-2"].wait()
        ended = wait_for(
            lambda: (j := store.get(job_id)).terminal and j, timeout=60, what="the job to end", context=logs
        )
        took = time.monotonic() - killed
        assert ended.status == "failed" and ended.error["type"] == "BoxLost", ended.error
        assert ended.error["detail"]["box"] == "box-2" and "box box-2" in ended.error["message"]
        assert took < 3 + 30, took  # the stale bound, then the other box's next look
        # box-1's part: stopped on seeing box-2 silent, or failed on its closed connections first.
        assert {m.host: m.status for m in ended.members}["box-1"] in ("failed", "stopped")
        # box-1 is free for the next job, and no process of the job is left on either box.
        wait_for(
            lambda: not [lease for lease in store.held_leases() if lease[1] == job_id],
            what="the job's leases released",
        )
        wait_for(lambda: not procs.children(workers["box-1"].pid), what="box-1's ranks gone", context=logs)
        print(f"\nbox killed -> job ended in {took:.1f} s (stale after 3 s)")
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)


def test_a_result_run_elsewhere_is_kept_as_a_job_and_refused_naming_what_does_not_hold(make_api):
    """POST /api/v1/import/job with the collectives result a Slurm run across two nodes wrote
    (app/api/examples/), and the ways a body fails to hold together."""
    import json

    api = make_api(embedded_worker=False, api_token="s3cret")
    body = json.loads((ROOT / "app" / "api" / "examples" / "slurm-collectives.json").read_text())
    headers = {"authorization": "Bearer s3cret"}
    assert api.post("/api/v1/import/job", json=body).status_code == 401
    kept = api.post("/api/v1/import/job", json=body, headers=headers)
    assert kept.status_code == 201, kept.text
    job = kept.json()
    assert (job["status"], job["nodes"], job["probe"]) == ("succeeded", 2, "collectives")
    assert sorted(b["box"] for b in job["boxes"]) == sorted(body["result"]["spanning"]["boxes"])
    assert job["result"] == body["result"] and kept.headers["location"] == f"/api/v1/jobs/{job['id']}"
    for wrong, field in (
        ({"probe": "matmul"}, "result"),
        ({"finished_at": body["started_at"] - 1}, "finished_at"),
        ({"boxes": [{"box": "n1", "node": 0}, {"box": "n2", "node": 2}]}, "boxes"),
        ({"params": {"iterations": 0}}, "params"),
    ):
        refused = api.post("/api/v1/import/job", json=body | wrong, headers=headers)
        assert_names_field(refused, field)
    campaign = {"probe": "collectives", "jobs": [body]}
    assert_names_field(api.post("/api/v1/import/campaign", json=campaign, headers=headers), "jobs.0.device")


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_data_parallel_step_across_two_boxes_trains_one_model_over_four_ranks(store):
    """DDP over 2 boxes x 2 gloo ranks: one world of four, rank 0's box writes the step."""
    a, b = boxes(store, ["box-a", "box-b"])
    params = {
        "device": "cpu",
        "model": {"kind": "cruncher", "dim": 64, "num_layers": 2},
        "strategy": "ddp",
        "batch_size": 4,
        "warmup_s": 0.05,
        "measure_s": 0.1,
        "min_iters": 3,
        "max_iters": 10,
    }
    job = store.submit(
        probe="data_parallel_step", params=params, timeout_s=300, limit=10, device="cpu", nodes=2
    )
    assert run_each_once([a, b]) == [True, True]
    done = store.get(job.id)
    assert done.status == "succeeded", done.error
    r = done.result
    assert r.ranks == 4 and r.backend == "gloo" and r.strategy == "ddp"
    assert r.tokens_per_sec == pytest.approx(4 * r.tokens_per_step_per_rank / r.step.median)
    assert "2 boxes, 2 on each" in r.assumptions[-1] and "elastic launcher" in r.assumptions[-1]
