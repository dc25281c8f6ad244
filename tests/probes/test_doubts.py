"""A run that shared its device, or whose timings spread widely, says so loudly on its job page
and in the compare view, and the calibration takes a run measured alone before it; from such a
run only when no other is recent, saying so (issue 28, point 8)."""

from app import device
from app.config import Settings
from app.main import create_app
from app.measured import doubts
from app.probes.matmul import MatmulPoint
from app.probes.results import Contention, Environment, Stats
from tests.support.api import Api
from tests.support.results import minimal, result_for


def _stats(median: float, best: float) -> Stats:
    return Stats(median=median, p20=best, p80=median, mean=median, best=best, iterations=20)


def _matmul(flop_per_sec: float, *, median: float, best: float, contention: Contention | None = None):
    me = device.describe()
    point = MatmulPoint(m=512, k=512, n=512, dtype="float32", flops=2 * 512**3, time=_stats(median, best),
                        flop_per_sec=flop_per_sec, best_flop_per_sec=flop_per_sec * median / best,
                        peak_flop_per_sec=None, mfu=None, predicted_seconds_at_peak=None)
    environment = minimal(Environment, device=me.kind, device_name=me.name, contention=contention)
    return result_for("matmul", environment=environment, points=[point], best={"float32": point})


LOADED = Contention(seconds=1.0, load_before=9.6, load_after=9.6, cpu_count=2, others_cpu_cores=0.0,
                    quiet=False, reasons=["a load average of 9.6 on 2 cores"])


def test_a_wide_spread_or_a_loaded_host_is_a_doubt():
    assert doubts.doubts(_matmul(1e10, median=0.0135, best=0.0130)) == []
    assert doubts.doubts(_matmul(1e10, median=0.6, best=0.01)) == [
        "its timings spread widely: a median 60 times the fastest iteration"]  # as the audit saw
    assert doubts.doubts(_matmul(1e10, median=0.0135, best=0.013, contention=LOADED)) == [
        "a load average of 9.6 on 2 cores"]


def _stored(api, results) -> list[int]:
    """Each result as a finished matmul job of this server's store, oldest first; their ids."""
    store, ids = api.app.state.store, []
    for result in results:
        job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
        store.claim(worker_id="w")
        store.finish(job.id, status="succeeded", result=result)
        ids.append(job.id)
    return ids


SPREAD = _matmul(9e10, median=0.6, best=0.01)  # fast, but its timings spread: a noisy best
BUSY = _matmul(8e10, median=0.014, best=0.013, contention=LOADED)


def test_the_calibration_leaves_doubtful_runs_out_and_the_pages_warn(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", embedded_worker=False)))
    try:
        ids = _stored(api, [SPREAD, BUSY, _matmul(2e10, median=0.0135, best=0.013)])
        peak = api.get("/api/v1/calibration").json()["matmul"]["float32"]
        assert (peak["job_id"], peak["flop_per_sec"], peak["runs_considered"]) == (ids[2], 2e10, 1)
        spread, loaded, quiet = (api.get(f"/benchmarks/jobs/{i}").text for i in ids)
        assert 'data-testid="doubts"' in spread and "a median 60 times the fastest iteration" in spread
        assert 'role="alert"' in loaded and "a load average of 9.6 on 2 cores" in loaded
        assert 'data-testid="doubts"' not in quiet
        compared = api.get(f"/benchmarks/compare?a={ids[1]}&b={ids[2]}").text
        assert 'data-testid="doubt-a"' in compared and 'data-testid="doubt-b"' not in compared
    finally:
        api.close()


def test_with_no_run_measured_alone_the_best_stands_and_says_why(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", embedded_worker=False)))
    try:
        ids = _stored(api, [SPREAD, BUSY])
        peak = api.get("/api/v1/calibration").json()["matmul"]["float32"]
        assert (peak["job_id"], peak["runs_considered"]) == (ids[0], 2)
        assert peak["doubts"] == ["its timings spread widely: a median 60 times the fastest iteration"]
    finally:
        api.close()
