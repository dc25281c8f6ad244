"""Idle and dripping connections cannot deny service: a normal client's answers while they are held.

Serves Tally as `make run` does (`python -m app`, its settings' defaults: 256 requests at once,
1000 connections, a 10 s header deadline, a 30 s body deadline) on 127.0.0.1 with a throw-away
database, then for --seconds holds --idle connections that send nothing (each opened again as the
server drops it) and --slow ones that send a body a byte a second, while one normal client sends
POST /api/v1/flops/matmul one request at a time:

    target: at least 95% of the normal client's answers are 200

Prints the answers by status, the share of 200 against the target, the latency p50/p99, and how
many of the idle connections were open on average. Exits 1 when the target is missed. (The audit
that set the target saw 0 of 125 answered with 260 idle connections, uvicorn's limit counting them.)

    .venv/bin/python bench/idle_sockets.py [--seconds 30] [--idle 260] [--slow 300]
"""

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/support/live.py and siege.py, shared with the tests

from tests.support.live import serve  # noqa: E402
from tests.support.siege import Siege  # noqa: E402

TARGET = 0.95
MATMUL = ("/api/v1/flops/matmul", {"m": 1024, "k": 256, "n": 64, "dtype": "bf16"})


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--seconds", type=float, default=30)
    cli.add_argument("--idle", type=int, default=260)
    cli.add_argument("--slow", type=int, default=300)
    args = cli.parse_args()
    with tempfile.TemporaryDirectory(prefix="tally-idle-") as tmp:
        env = {"TALLY_EMBEDDED_WORKER": "false", "TALLY_DATABASE_PATH": f"{tmp}/tally.db",
               "TALLY_LOG_LEVEL": "warning"}
        with serve([sys.executable, "-m", "app"], env, Path(tmp) / "server.log") as live:
            siege = Siege(live.url, idle=args.idle, slow=args.slow)
            try:
                time.sleep(2)  # the connections open before the normal client starts
                statuses: Counter = Counter()
                seconds, open_counts = [], []
                with httpx.Client(timeout=10) as client:
                    deadline = time.monotonic() + args.seconds
                    while time.monotonic() < deadline:
                        started = time.perf_counter()
                        try:
                            statuses[client.post(live.url + MATMUL[0], json=MATMUL[1]).status_code] += 1
                        except httpx.TransportError as e:
                            statuses[type(e).__name__] += 1
                        seconds.append(time.perf_counter() - started)
                        open_counts.append(siege.open)
                        time.sleep(0.05)
            finally:
                siege.stop.set()
    total = sum(statuses.values())
    share = statuses[200] / total
    seconds.sort()
    print(f"{args.idle} idle and {args.slow} dripping connections held for {args.seconds:g} s "
          f"(idle ones open: mean {statistics.mean(open_counts):.0f})")
    print("normal client's answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str)))
    print(f"share 200: {share:.3f} (target >= {TARGET}); latency p50 {statistics.median(seconds) * 1e3:.1f} ms, "
          f"p99 {seconds[int(0.99 * (len(seconds) - 1))] * 1e3:.1f} ms")
    return 0 if share >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
