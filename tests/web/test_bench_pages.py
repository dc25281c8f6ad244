"""The benchmark pages as text (no browser): one word per meaning on the job and compare pages,
captions that say what a CPU chart draws, progress before any count, signed percentages,
the train-step speed figures, the compare page's deltas and warnings, and the CLI's unit.

Expected figures are worked by hand from the stored times: a 256-cube matmul is
2 * 256^3 = 33,554,432 FLOPs (a multiply-add is 2 FLOPs)."""

import dataclasses
import io
import re
from typing import Any

from app.cli.probe import printed
from app.probes.results import MemoryComparison
from tests.support.bench_jobs import finished, here, matmul, matmul_point, stats
from tests.support.html import chart, element, text
from tests.support.results import minimal, result_for

# 33,554,432 FLOPs in 0.3258 ms = 1.030e11 FLOP/s = 0.103 TFLOP/s; in 0.3 ms = 0.112 TFLOP/s.
GOOD = matmul_point(256, 256, 256, "float32", 0.3258e-3, 0.3e-3)
SMALL = matmul_point(64, 64, 64, "float32", 1e-4, 0.9e-4)  # 524,288 FLOPs: 0.00524 TFLOP/s median


def row(html: str, label: str) -> list[str]:
    """The cells of the table row headed `label`."""
    for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S):
        cells = [text(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)]
        if cells and cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r}")


def test_one_word_per_meaning_the_same_number_on_job_and_compare_pages(make_api):
    api = make_api()
    store = api.app.state.store
    a = finished(store, matmul([GOOD, SMALL]))
    b = finished(store, matmul([matmul_point(256, 256, 256, "float32", 0.6516e-3, 0.6e-3), SMALL]))
    job = api.get(f"/benchmarks/jobs/{a}").text
    assert element(job, "metric-float32/median") == "0.103 TFLOP/s float32: best shape, median (256×256×256)"
    assert element(job, "metric-float32/best") == ("0.112 TFLOP/s float32: best shape, best iteration "
                                                   "(256×256×256)")
    headers = re.findall(r'<th scope="col">(.*?)</th>', job)
    assert "TFLOP/s (median)" in headers and "TFLOP/s (best iteration)" in headers and "best" not in headers
    compare = api.get(f"/benchmarks/compare?a={a}&b={b}").text
    # B took twice A's time: half the throughput, a ratio of 0.500.
    assert row(compare, "float32: best shape, median") == ["0.103 TFLOP/s", "0.0515 TFLOP/s",
                                                          "-0.0515 TFLOP/s", "0.500×"]
    assert row(compare, "float32: best shape, best iteration")[0] == "0.112 TFLOP/s"


def test_captions_say_what_a_cpu_chart_draws_and_what_it_lacks(make_api):
    api = make_api()
    store = api.app.state.store
    cpu = finished(store, matmul([GOOD, SMALL]))
    page = api.get(f"/benchmarks/jobs/{cpu}").text
    sizes = element(page, "sizes-caption")
    assert "No catalogue peak for this device" in sizes and "ashed" not in sizes
    assert all(v is None for v in chart(page)["peaks"].values())  # and indeed no peak is drawn
    roof = element(page, "roofline-caption")
    assert "compute ceiling, 0.103 TFLOP/s" in roof and f"run #{cpu}" in roof
    assert "Not drawn: the memory ceiling" in roof and "bandwidth and compute" not in roof

    copy = result_for("bandwidth", environment=here(), gb_per_sec=12.5, best_gb_per_sec=13.0,
                      size_bytes=2**20, bytes_moved=2**21, time=stats(1e-4))
    bandwidth = finished(store, copy)
    roof = element(api.get(f"/benchmarks/jobs/{cpu}").text, "roofline-caption")
    assert f"memory ceiling, 12.5 GB/s (bandwidth run #{bandwidth})" in roof and "Not drawn" not in roof

    # As on a GPU the catalogue lists: every float32 point carries its dense float32 peak.
    listed = [dataclasses.replace(p, peak_flop_per_sec=67e12) for p in (GOOD, SMALL)]
    sizes = element(api.get(f"/benchmarks/jobs/{finished(store, matmul(listed))}").text, "sizes-caption")
    assert "Dashed lines: the catalogue's dense peak for float32" in sizes


def test_a_job_without_progress_counts_is_starting_never_0_of_0(make_api):
    api = make_api()
    store = api.app.state.store
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    queued = api.get(f"/ui/benchmarks/jobs/{job.id}").text
    assert element(queued, "job-progress") == "waiting for the device…"
    store.claim(worker_id="w")
    running = api.get(f"/ui/benchmarks/jobs/{job.id}").text
    assert element(running, "job-progress") == "starting…" and "0 / 0" not in running
    assert re.search(r"<progress aria-label", running)  # no value: an indeterminate bar
    store.progress(job.id, done=3, total=10, message="measuring")
    counted = api.get(f"/ui/benchmarks/jobs/{job.id}").text
    assert element(counted, "job-progress") == "3 / 10 measuring"


def step(batch_size: int = 4, relative_error: float = 0.0, forward_s: float = 0.0123) -> Any:
    memory = minimal(MemoryComparison, predicted={"total": 1000}, measured_peak_allocated=1000,
                     relative_error=relative_error, method="tracked")
    # 4 x 128 tokens per step in a 0.04 s median step: 12,800 tokens/s.
    return result_for("train_step", environment=here(), model="cruncher", precision="fp32", mfu=None,
                      batch_size=batch_size, seq_len=128, tokens_per_step=512, tokens_per_sec=12_800.0,
                      step=stats(0.04), forward=stats(forward_s), backward=stats(0.0246),
                      optimizer_step=stats(0.0031), achieved_flop_per_sec=5.5e10, memory=memory)


def test_train_step_on_a_cpu_shows_its_times_and_achieved_flops(make_api):
    api = make_api()
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, step())}").text
    assert element(page, "metric-forward") == "12.3 ms forward, median"
    assert element(page, "metric-backward") == "24.6 ms backward, median"
    assert element(page, "metric-optimizer") == "3.10 ms optimizer step, median"
    assert element(page, "metric-achieved") == "0.0550 TFLOP/s achieved, median step"
    assert element(page, "metric-mfu") == "n/a MFU (median step)"


def test_a_relative_error_that_rounds_to_zero_is_never_minus_zero(make_api):
    api = make_api()
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, step(relative_error=-0.00001))}").text
    assert element(page, "metric-memory") == "0.0% peak memory, predicted vs measured"
    assert "-0.0%" not in page
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, step(relative_error=0.042))}").text
    assert element(page, "metric-memory").startswith("+4.2%")


def test_compare_sets_two_train_steps_side_by_side_and_names_what_differs(make_api):
    api = make_api()
    store = api.app.state.store
    a, b = finished(store, step()), finished(store, step(batch_size=8, forward_s=0.0246))
    page = api.get(f"/benchmarks/compare?a={a}&b={b}").text
    assert row(page, "forward, median") == ["12.3 ms", "24.6 ms", "+12.3 ms", "2.00×"]
    assert row(page, "achieved, median step")[:2] == ["0.0550 TFLOP/s", "0.0550 TFLOP/s"]
    assert "batch size: A 4, B 8" in element(page, "compare-differences")
    spec = chart(page)
    assert spec["type"] == "compare_bars" and spec["sets"]["A"][1] == 12.3 and spec["sets"]["B"][1] == 24.6


def test_compare_overlays_matmul_runs_and_warns_of_other_shapes_and_dtypes(make_api):
    api = make_api()
    store = api.app.state.store
    a = finished(store, matmul([GOOD, SMALL]))
    b = finished(store, matmul([GOOD, matmul_point(128, 128, 128, "bfloat16", 1e-4, 0.9e-4)]))
    page = api.get(f"/benchmarks/compare?a={a}&b={b}").text
    said = element(page, "compare-differences")
    assert "only A has 64×64×64" in said and "only B has 128×128×128" in said
    assert "dtypes: A float32, B bfloat16, float32" in said
    spec = chart(page)
    assert {(s["run"], s["group"]) for s in spec["series"]} == {("A", "float32"), ("B", "float32"),
                                                               ("B", "bfloat16")}
    same = finished(store, matmul([GOOD, SMALL]))
    assert 'data-testid="compare-differences"' not in api.get(f"/benchmarks/compare?a={a}&b={same}").text


def test_compare_runs_of_different_probes_says_so(make_api):
    api = make_api()
    store = api.app.state.store
    a = finished(store, matmul([GOOD]))
    b = finished(store, result_for("bandwidth", environment=here(), gb_per_sec=12.5, time=stats(1e-4)))
    page = api.get(f"/benchmarks/compare?a={a}&b={b}").text
    assert "Run A is a matmul run and run B a bandwidth run" in element(page, "compare-message")
    assert "compare-table" not in page
    failed = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="w")
    store.finish(failed.id, status="failed", error={"type": "E", "message": "m", "detail": {}})
    page = api.get(f"/benchmarks/compare?a={a}&b={failed.id}").text
    assert "B has no result" in element(page, "compare-message")


def test_the_cli_prints_tflops_as_the_pages_do():
    from rich.console import Console

    console = Console(width=250, record=True, file=io.StringIO())
    for part in printed(matmul([GOOD, SMALL])):
        console.print(part)
    out = console.export_text()
    assert "GFLOP/s" not in out and "TFLOP/s (median)" in out and "TFLOP/s (best iteration)" in out
    line = next(line for line in out.splitlines() if "256x256x256" in line)
    assert "0.103" in line and "0.112" in line and "0.00524" in next(
        line for line in out.splitlines() if "64x64x64" in line)
