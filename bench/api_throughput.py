"""Requests/s and latency of calculator routes beside a trivial echo route.

One uvicorn worker serves Tally (create_app, as `tally serve` does) plus POST /bench/echo
(a FastAPI route that returns its JSON body, first in the table, so it does the least
routing) on loopback. wrk drives each route in turn with the same connections and
duration, so the ratio route/echo measures what Tally's validation, arithmetic and
serialisation cost over bare FastAPI.

Two such servers run side by side: one with the API's flat route table (app/api/router.py,
what Tally serves) and one with plain include_router, so the ratios show whether the flat
table still earns its place.

    make bench                      # or: .venv/bin/python bench/api_throughput.py
    python bench/api_throughput.py --seconds 10 --connections 32

Target (issue 2): each calculator route >= 0.8 x the echo's requests/s; the inference routes
(issue 14) at no lower a ratio than the training routes.
Results, and where the remaining time goes, are in docs/performance.md.
Needs wrk (Debian: apt-get install wrk).
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ROUTES = {
    "echo": ("/bench/echo", {"model": "gpt2", "batch_size": 8, "seq_len": 1024}),
    "echo-last": ("/bench/echo-last", {"model": "gpt2", "batch_size": 8, "seq_len": 1024}),
    "flops/transformer": ("/api/v1/flops/transformer", {"model": "gpt2", "batch_size": 8, "seq_len": 1024}),
    "memory/training": ("/api/v1/memory/training",
                        {"model": "llama2-7b", "batch_size": 1, "seq_len": 4096, "zero_stage": 1,
                         "data_parallel": 8, "gpu": "h100-sxm"}),
    "inference/memory": ("/api/v1/inference/memory",
                         {"model": "llama3-8b", "gpu": "h100-sxm", "context": 8192, "concurrency": 16}),
    "inference/capacity": ("/api/v1/inference/capacity",
                           {"model": "llama3-8b", "gpu": "h100-sxm", "context": 8192, "concurrency": 16}),
    "inference/time": ("/api/v1/inference/time",
                       {"model": "llama3-8b", "gpu": "h100-sxm", "prompt_tokens": 2048, "output_tokens": 256,
                        "concurrency": 16}),
}

# "echo" is the app's first route, so it pays the least routing of any route: the
# strict baseline the ratios use. "echo-last" is the same route added after Tally's,
# as any add-on route would be; the two bracket what a route's table position costs.
# Everything else is installed exactly as create_app() does.
SERVER = """
import os
from typing import Any
from app.api import router
from app import main

if os.environ["TALLY_BENCH_ROUTING"] == "nested":
    router.include_api = router.include_api_nested
app = main.create_app()

@app.post("/bench/echo")
async def echo(body: dict[str, Any]) -> dict[str, Any]:
    return body

app.router.routes.insert(0, app.router.routes.pop())  # first in the table

@app.post("/bench/echo-last")
async def echo_last(body: dict[str, Any]) -> dict[str, Any]:
    return body
"""
ROUTINGS = ("flat", "nested")

LUA = """wrk.method = "POST"
wrk.body = [[{body}]]
wrk.headers["Content-Type"] = "application/json"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(port: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def to_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def run_wrk(url: str, body: dict, seconds: int, connections: int, threads: int, tmp: Path) -> dict:
    script = tmp / "post.lua"
    script.write_text(LUA.format(body=json.dumps(body)))
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": to_ms(re.search(r"\s50%\s+(\S+)", out).group(1)),
        "p99_ms": to_ms(re.search(r"\s99%\s+(\S+)", out).group(1)),
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors.group(1).strip() if errors else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="alternate the routes this many times")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")

    ports = {routing: free_port() for routing in ROUTINGS}
    results: dict[str, dict[str, list[dict]]] = {r: {name: [] for name in ROUTES} for r in ROUTINGS}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "bench_server.py").write_text(SERVER)
        servers = []
        for routing, port in ports.items():
            env = {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{ROOT}", "TALLY_BENCH_ROUTING": routing,
                   "TALLY_DATABASE_PATH": str(tmp / f"{routing}.db"), "TALLY_EMBEDDED_WORKER": "false"}
            servers.append(subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "bench_server:app", "--host", "127.0.0.1",
                 "--port", str(port), "--workers", "1", "--log-level", "warning", "--no-access-log"],
                env=env, cwd=ROOT))
        try:
            for port in ports.values():
                wait_until_up(port)
                for path, body in ROUTES.values():  # warm up each route
                    run_wrk(f"http://127.0.0.1:{port}{path}", body, 2, args.connections, args.threads, tmp)
            for _ in range(args.rounds):  # interleave, so drift hits every route and server alike
                for name, (path, body) in ROUTES.items():
                    for routing, port in ports.items():
                        results[routing][name].append(run_wrk(
                            f"http://127.0.0.1:{port}{path}", body, args.seconds, args.connections,
                            args.threads, tmp))
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=10)

    print(f"one uvicorn worker each, wrk -t{args.threads} -c{args.connections}, "
          f"{args.rounds} x {args.seconds}s per route, loopback, servers taking turns")
    print(f"{'routing':<8} {'route':<20} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs echo':>8} "
          f"{'non-2xx':>8}")
    for routing, by_route in results.items():
        echo_rps = sum(r["rps"] for r in by_route["echo"]) / args.rounds
        for name, runs in by_route.items():
            rps = sum(r["rps"] for r in runs) / len(runs)
            p50 = sum(r["p50_ms"] for r in runs) / len(runs)
            p99 = sum(r["p99_ms"] for r in runs) / len(runs)
            bad = sum(r["non_2xx"] for r in runs)
            print(f"{routing:<8} {name:<20} {rps:>9.0f} {p50:>8.2f} {p99:>8.2f} {rps / echo_rps:>8.2f} "
                  f"{bad:>8d}")
            for r in runs:
                if r["socket_errors"]:
                    print(f"  {routing} {name}: socket errors {r['socket_errors']}")


if __name__ == "__main__":
    main()
