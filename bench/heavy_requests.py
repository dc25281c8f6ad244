"""No request stalls another: /healthz and a cheap calculator's latency while heavy calculations run.

Serves Tally as `make run` does (`python -m app`, its settings' defaults but a throw-away database
and no embedded dispatcher) on 127.0.0.1, then for --seconds keeps six heavy requests in flight,
each from a client address of its own (127.0.0.2 to 127.0.0.7, so each client's limit is its own,
as six people's would be): four layout searches (the audit's body, seconds of pure Python each,
stopped at TALLY_COMPUTE_BUDGET_S) and two "will it run" on the largest inline model the schema
admits. Meanwhile one more client alternates GET /healthz and POST /api/v1/flops/matmul, one
request at a time, and their latencies are the figures:

    target: /healthz p99 <= 100 ms, a cheap calculator's p99 <= 150 ms

Prints each's count, p50, p99 and worst, the ratio of p99 to its target (at most 1 meets it), and
how the heavy requests were answered (200, 422 too_costly, 429, 503). Exits 1 when a target is
missed or a cheap request failed.

    .venv/bin/python bench/heavy_requests.py [--seconds 30] [--searches 4] [--fits 2]
"""

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/support/live.py, shared with the tests

from tests.support.live import serve  # noqa: E402

TARGETS_S = {"healthz": 0.100, "matmul": 0.150}
SEARCH = ("/api/v1/plan/training", {
    "model": "llama3-70b", "gpu": "h100-sxm", "seq_len": 8192, "num_gpus": 8, "global_batch_sequences": 73513440,
    "limits": {"pipeline_parallel": [1, 2, 4], "virtual_stages": [1], "zero_stage": [0, 1]}})
# The schema's largest layers, widths and vocabulary: seconds for fit's dozen memory answers.
HUGE = {"n_layers": 1024, "d_model": 131072, "n_heads": 1024, "vocab_size": 10_000_000, "mlp": "swiglu",
        "norm": "rmsnorm", "position": "rope", "max_seq_len": 10_000_000, "n_kv_heads": 8, "bias": False}
FIT = ("/api/v1/fit", {"model": HUGE, "gpu": "h100-sxm", "seq_len": 8192})
CHEAP_TIMEOUT_S = 30
MATMUL = ("/api/v1/flops/matmul", {"m": 1024, "k": 256, "n": 64, "dtype": "bf16"})


def heavy(url: str, address: str, request: tuple[str, dict], stop: threading.Event, answers: Counter) -> None:
    """Send `request` again as soon as it is answered, from `address`, until `stop`."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=600) as client:
        while not stop.is_set():
            try:
                response = client.post(url + request[0], json=request[1])
            except httpx.TransportError as e:
                answers[(request[0], 0, type(e).__name__)] += 1
                continue
            kind = response.json()["detail"][0]["type"] if response.status_code >= 400 else ""
            answers[(request[0], response.status_code, kind)] += 1


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--seconds", type=float, default=30)
    cli.add_argument("--searches", type=int, default=4)
    cli.add_argument("--fits", type=int, default=2)
    args = cli.parse_args()
    with tempfile.TemporaryDirectory(prefix="tally-heavy-") as tmp:
        env = {"TALLY_EMBEDDED_WORKER": "false", "TALLY_DATABASE_PATH": f"{tmp}/tally.db",
               "TALLY_LOG_LEVEL": "warning"}
        with serve([sys.executable, "-m", "app"], env, Path(tmp) / "server.log") as live:
            return run(live.url, args)


def run(url: str, args: argparse.Namespace) -> int:
    stop, answers = threading.Event(), Counter()
    loads = [SEARCH] * args.searches + [FIT] * args.fits
    threads = [threading.Thread(target=heavy, args=(url, f"127.0.0.{i + 2}", load, stop, answers), daemon=True)
               for i, load in enumerate(loads)]
    for thread in threads:
        thread.start()
    time.sleep(2)  # the heavy requests reach the workers before the sampling starts
    seconds: dict[str, list[float]] = {"healthz": [], "matmul": []}
    failed = 0
    with httpx.Client(timeout=CHEAP_TIMEOUT_S) as client:
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            for name in seconds:
                started = time.perf_counter()
                try:
                    response = (client.get(f"{url}/healthz") if name == "healthz"
                                else client.post(url + MATMUL[0], json=MATMUL[1]))
                    failed += response.status_code != 200
                except httpx.TimeoutException:  # a stalled server: counted at the client's timeout
                    failed += 1
                seconds[name].append(time.perf_counter() - started)
            time.sleep(0.02)
    stop.set()
    print(f"{len(loads)} heavy requests kept in flight ({args.searches} searches, {args.fits} fits) for "
          f"{args.seconds:g} s; cheap requests one at a time beside them")
    print(f"{'request':>10} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'worst ms':>9} {'target':>7} {'p99/t':>6}")
    missed = False
    for name, times in seconds.items():
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        ratio = p99 / TARGETS_S[name]
        missed |= ratio > 1
        print(f"{name:>10} {len(times):>6} {statistics.median(times) * 1e3:>8.1f} {p99 * 1e3:>8.1f} "
              f"{times[-1] * 1e3:>9.1f} {TARGETS_S[name] * 1e3:>7.0f} {ratio:>6.2f}")
    print("heavy answers: " + ", ".join(f"{path} {status}{' ' + kind if kind else ''}: {n}"
                                        for (path, status, kind), n in sorted(answers.items())))
    print(f"cheap requests failed: {failed}")
    return 1 if missed or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
