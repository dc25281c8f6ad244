"""The collectives probe on the CPU: gloo processes started by app/bench/dist.py, checked
against nccl-tests' definitions and a latency-bandwidth model fitted to the same run."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from app.accounting.comm.collectives import fit_link
from app.bench import collectives
from app.bench.dist import FAIL_ON_RANK_ENV, RankDied, launch

SIZES = [4**i * 1024 for i in range(1, 8)]  # 4 KiB .. 16 MiB
LARGEST_TOLERANCE = 0.5
NEXT_RATIO = (1 / 3, 3.0)
"""Measured over fitted time at the largest size (16 MiB), and the band at the next (4 MiB). On
this two-core box, with both ranks and the parent sharing the cores beside other work, medians
of 10 runs came out 0.96 to 1.05 of the fit at 16 MiB (which weighs most in the fit, but is not
fitted alone), 0.54 to 2.02 at 4 MiB, and 0.4 to 5x at small sizes, where a scheduler's hiccup is
a whole run. Under the suite's two workers at a load average of 9, one run in five broke 35% at
16 MiB: hence 20 runs per point, and 50%."""
FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0}


def quiet(*_):
    return None


@pytest.fixture(scope="module")
def two_ranks():
    return collectives.run({"device": "cpu", "sizes_bytes": SIZES, "iterations": 20, "warmup_iterations": 2},
                           quiet)


def test_every_collective_checks_its_values_over_two_gloo_ranks(two_ranks):
    r = two_ranks
    assert r["backend"] == "gloo" and r["ranks"] == 2 and r["checked"] and r["check_passed"] is True
    assert {p["collective"] for p in r["points"]} == set(FACTORS)
    assert all(p["errors"] == 0 for p in r["points"]) and len(r["points"]) == 5 * len(SIZES)


def test_busbw_is_algbw_times_the_nccl_tests_factor(two_ranks):
    for p in two_ranks["points"]:
        assert p["size_bytes"] in SIZES and p["elements"] == p["size_bytes"] // 4  # float32
        assert p["algbw_bytes_per_sec"] == p["size_bytes"] / p["time"]["median"]
        assert p["bus_factor"] == FACTORS[p["collective"]](2)
        assert p["busbw_bytes_per_sec"] == p["algbw_bytes_per_sec"] * p["bus_factor"]
        assert p["catalogue_seconds"] is None  # a CPU has no catalogue link


def test_large_messages_follow_the_model_fitted_to_the_run(two_ranks):
    fits = {f["collective"]: f for f in two_ranks["fits"]}
    for op in FACTORS:
        mine = sorted((p for p in two_ranks["points"] if p["collective"] == op),
                      key=lambda p: p["size_bytes"])
        fit = fits[op]
        assert fit["steps"] == (2 if op == "all_reduce" else 1) and fit["bytes_per_sec"] > 0
        for p in mine:  # each point's prediction is the fitted line at its size
            want = fit["latency_s"] * fit["steps"] + p["bus_factor"] * p["size_bytes"] / fit["bytes_per_sec"]
            assert p["fitted_seconds"] == pytest.approx(want, rel=1e-12)
        ratios = [p["time"]["median"] / p["fitted_seconds"] for p in mine]
        assert abs(ratios[-1] - 1) < LARGEST_TOLERANCE, (op, ratios)
        assert NEXT_RATIO[0] < ratios[-2] < NEXT_RATIO[1], (op, ratios)
        assert mine[-1]["algbw_bytes_per_sec"] > 10 * mine[0]["algbw_bytes_per_sec"], op  # 4096x the bytes


def test_the_fit_recovers_a_known_link():
    """Times made from latency 20 us per step and 5 GB/s: the fit gives both back."""
    sizes = [2**i for i in range(10, 25, 2)]
    seconds = [4 * 20e-6 + 2 * 3 / 4 * s / 5e9 for s in sizes]  # all_reduce over 4 ranks: 6 steps
    fit = fit_link("all_reduce", 4, sizes, seconds)
    assert fit.steps == 6 and fit.latency_s == pytest.approx(20e-6 * 4 / 6)
    assert fit.bytes_per_sec == pytest.approx(5e9) and fit.rms_relative_error < 1e-9


def test_three_ranks_check_uneven_pieces():
    """Three ranks: S is rounded to a multiple of 3 elements for the split collectives."""
    r = collectives.run({"device": "cpu", "ranks": 3, "sizes_bytes": [1000, 65536], "iterations": 2,
                         "warmup_iterations": 1, "collectives": ["all_gather", "reduce_scatter", "all_to_all",
                                                                 "all_reduce"]}, quiet)
    assert r["ranks"] == 3 and r["check_passed"] is True
    sizes = {(p["collective"], p["size_bytes"]) for p in r["points"]}
    assert ("all_gather", 996) in sizes and ("all_reduce", 1000) in sizes  # 250 elements -> 249 = 3 x 83
    assert next(p for p in r["points"] if p["collective"] == "all_reduce")["bus_factor"] == 4 / 3


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # the session id, 6th field of stat(5)
                members.append(int(entry))
    return members


def test_a_failing_rank_ends_the_job_with_its_error_and_leaves_no_process():
    """Rank 1 raises once its group is up; rank 0, waiting in a collective for it, must not hang."""
    job = {"job_id": 1, "probe": "collectives", "params": {"device": "cpu", "sizes_bytes": [1024]}}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "app.bench.child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True, env=os.environ | {FAIL_ON_RANK_ENV: "1"})
    proc.stdin.write(json.dumps(job) + "\n")
    proc.stdin.flush()
    last = None
    for line in proc.stdout:
        last = json.loads(line)
        if last["type"] in ("result", "error"):
            break
    code = proc.wait(timeout=60)
    proc.stdin.close()
    assert time.monotonic() - start < 60
    assert code == 1 and last["type"] == "error" and last["status"] == "failed"
    assert last["error"]["type"] == "RuntimeError"
    assert last["error"]["message"] == f"rank 1: rank 1 failed on purpose ({FAIL_ON_RANK_ENV})"
    deadline = time.monotonic() + 10
    while _session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_members(proc.pid) == []


def killed_on_rank_1(rank: int, world: int, args: dict, report) -> dict:
    """A rank 1 that dies by SIGKILL, reporting nothing, while rank 0 waits for it in a barrier."""
    import torch.distributed as dist

    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return {}


def test_a_rank_killed_without_a_word_ends_the_launch_not_hangs_it():
    pids: list[int] = []
    start = time.monotonic()
    with pytest.raises(RankDied, match=r"rank 1 exited with code -9"):
        launch(killed_on_rank_1, {}, ranks=2, device_type="cpu", progress=quiet, pids=pids)
    assert time.monotonic() - start < 60
    for pid in pids:  # both ranks are gone (or zombies): the dead one and the one left waiting
        if os.path.exists(f"/proc/{pid}"):
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] == "Z", pid
