"""A result measured under contention says so (app/bench/contention.py): the verdict from /proc, the
field older stored results lack, and the job page's warning line."""

import subprocess
import sys

from app.bench import contention
from app.config import Settings
from app.main import create_app
from app.probes.registry import RESULTS
from app.probes.results import BusyProcess, Contention, Environment
from tests.support.api import Api
from tests.support.results import minimal, result_for
from tests.support.waiting import wait_for

BUSY = Contention(seconds=2.0, load_before=0.1, load_after=1.2, cpu_count=2, others_cpu_cores=0.95,
                  busy=[BusyProcess(pid=42, name="trainer", cpu_cores=0.9)], quiet=False,
                  reasons=["other processes used 0.95 cores"])


def test_the_verdict_counts_other_processes_cpu_inside_the_window():
    before = {1: ("probe", 10.0), 2: ("idle", 5.0), 3: ("trainer", 100.0)}
    after = {1: ("probe", 12.0), 2: ("idle", 5.01), 3: ("trainer", 101.8), 4: ("newcomer", 0.4)}
    seen = contention.judge(before, after, seconds=2.0, exclude={1}, load_before=0.5, load_after=1.5,
                            cpu_count=2)
    assert [(b.pid, b.name, b.cpu_cores) for b in seen.busy] == [(3, "trainer", 0.9), (4, "newcomer", 0.2)]
    assert (seen.others_cpu_cores, seen.quiet) == (1.105, False)
    calm = contention.judge(before, {1: ("probe", 12.0), 2: ("idle", 5.1)}, seconds=2.0, exclude={1},
                      load_before=None, load_after=None, cpu_count=2)
    assert (calm.busy, calm.quiet) == ([], True)  # the probe's own CPU time is not contention


def test_a_busy_neighbour_is_caught_by_the_watch():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watch = contention.Watch()
        # The spinner has used a second of CPU inside the window: well over half a core.
        wait_for(lambda: contention.cpu_times().get(spinner.pid, ("", 0))[1] - watch.before.get(
            spinner.pid, ("", 0))[1] >= 1.0, what="the spinner to burn a CPU second")
        seen = watch.finish()
    finally:
        spinner.kill()
        spinner.wait()
    assert not seen.quiet and seen.cpu_count >= 1 and seen.load_before is not None
    assert spinner.pid in [b.pid for b in seen.busy]


def test_an_older_stored_result_without_contention_still_parses():
    stored = RESULTS.dump_python(result_for("bandwidth"), mode="json")
    del stored["environment"]["contention"]
    assert RESULTS.validate_python(stored).environment.contention is None
    busy = RESULTS.dump_python(result_for("bandwidth", environment=minimal(Environment, contention=BUSY)))
    assert RESULTS.validate_python(busy).environment.contention == BUSY


def test_the_job_page_warns_of_a_result_measured_under_contention(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", embedded_worker=False)))
    store = api.app.state.store
    try:
        pages = []
        for contention in (BUSY, None):
            job = store.submit(probe="bandwidth", params={}, timeout_s=60, limit=10)
            store.claim(worker_id="w")
            environment = minimal(Environment, device="cpu", contention=contention)
            store.finish(job.id, status="succeeded", result=result_for("bandwidth", environment=environment))
            pages.append(api.get(f"/benchmarks/jobs/{job.id}").text)
        busy, quiet = pages
        assert "Not measured on a quiet device" in busy and "trainer 0.9" in busy
        assert "Not measured on a quiet device" not in quiet
    finally:
        api.close()


def test_every_probe_result_carries_its_contention():
    from app.bench import bandwidth  # torch: only this test needs it

    raw = {"device": "cpu", "size_bytes": 2**20, "warmup_s": 0, "measure_s": 0.001, "max_iters": 5}
    watched = bandwidth.run(raw, lambda *_: None)["environment"]["contention"]
    assert watched["seconds"] > 0 and watched["cpu_count"] >= 1 and isinstance(watched["quiet"], bool)


def test_another_process_on_the_probes_gpu_is_contention(monkeypatch):
    counts = iter([1, 2])  # the probe alone as it starts; a neighbour by its end
    monkeypatch.setattr(contention.device, "gpu_process_count",
                        lambda index: next(counts) if index == 3 else None)
    monkeypatch.setattr(contention, "cpu_times", lambda: {1: ("idle", 0.0)})
    seen = contention.Watch(gpu=3).finish()
    assert (seen.gpu_processes, seen.others_cpu_cores, seen.quiet) == (2, 0.0, False)
    alone = contention.judge({}, {}, seconds=1, exclude=set(), load_before=None, load_after=None, cpu_count=1,
                       gpu_processes=1)
    assert alone.quiet
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert contention.visible_gpu() == 3


def test_a_load_above_the_cores_is_contention_though_no_neighbour_is_seen():
    """Issue 28, point 8: matmuls 12-60x slower than their best iteration were stored as quiet at a
    load average of 9.6 on 2 cores (the neighbours ran in other containers, invisible in /proc)."""
    hidden = contention.judge({1: ("probe", 0.0)}, {1: ("probe", 2.0)}, seconds=1.0, exclude={1},
                              load_before=9.6, load_after=9.1, cpu_count=2)
    assert not hidden.quiet and hidden.reasons == ["a load average of 9.6 on 2 cores"]
    own = contention.judge({}, {}, seconds=1.0, exclude=set(), load_before=2.4, load_after=2.9, cpu_count=2)
    assert own.quiet and own.reasons == []  # the probe's own two threads and a little more
