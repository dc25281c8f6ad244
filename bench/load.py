"""Calculator throughput while a benchmark job runs, and whether the job's result holds.

Serves Tally as `make run` does (`python -m app`: one uvicorn worker with the
embedded job dispatcher) on 127.0.0.1 with a throw-away database, then:

1. runs a CPU train_step probe alone, as the baseline;
2. submits the same probe again and, while it runs, drives ten calculator routes
   (the docs' curl bodies, cycled) with wrk: --connections connections for
   --seconds seconds;
3. reports requests/s, p50/p99 latency and errors (non-2xx responses and socket
   errors), how the job overlapped the load, and the probe's result under load
   against the baseline: the deterministic fields must be identical (the losses within
   LOSS_REL_TOLERANCE of each other), the timings are shown as a ratio for information.

Exits 1 when a deterministic field changed, a request failed or a job did not
succeed. Needs wrk (Debian: apt-get install wrk). Nothing leaves loopback.

    .venv/bin/python bench/load.py                  # 32 connections, 30 s
    .venv/bin/python bench/load.py --seconds 10 --connections 64
"""

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"

# The docs' curl examples (docs/api/; tests/ops/test_docs_examples.py runs every one, so they stay valid).
CALCULATORS = {
    "/api/v1/flops/transformer": {"model": "llama3-8b", "batch_size": 1, "seq_len": 8192, "causal": "halved"},
    "/api/v1/memory/training": {"model": "llama2-7b", "precision": "bf16_mixed", "optimizer": "adamw",
                                "batch_size": 1, "seq_len": 4096, "recompute": "selective", "zero_stage": 1,
                                "data_parallel": 8, "gpu": "h100-sxm"},
    "/api/v1/time/training": {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm", "dtype": "bf16",
                              "num_gpus": 1024, "mfu": 0.5, "price_per_gpu_hour": 2.5},
    "/api/v1/flops/matmul": {"m": 1024, "k": 256, "n": 64, "dtype": "bf16"},
    "/api/v1/tensors/memory": {"shape": [49152, 12288], "dtype": "float32"},
    "/api/v1/dtypes/encode": {"value": 0.15625, "dtype": "float32"},
    "/api/v1/flops/mlp": {"batch": 1024, "dims": [256, 256, 64]},
    "/api/v1/tensors/layout": {"shape": [3, 2], "stride": [1, 3], "index": [2, 1], "view_shape": [2, 3]},
    "/api/v1/memory/max-model": {"gpu": "h100-sxm", "num_gpus": 8, "precision": "fp32", "optimizer": "adamw"},
    "/api/v1/time/mfu": {"flops": 5.05e16, "seconds": 16, "gpu": "h100-sxm", "dtype": "bf16", "num_gpus": 8},
}

# A small GPT-2-style model (3.7M parameters) trained in fp32 with AdamW on the CPU.
# On the 2-core development machine a step takes about 0.2 s alone but 1.1-1.3 s
# under load (torch's two threads share the cores with wrk and the server), and the
# rest of the job (child process, torch import, one memory-tracked step) about 3 s
# alone and 8-13 s under load: 2 + 12 steps keep the whole job (about 25 s) inside
# the 30 s window. A fixed seed and a fixed step count make the losses repeatable
# (train_step does not derive its step count from a time budget, as matmul does).
PROBE = {"probe": "train_step", "timeout_s": 600, "params": {
    "model": {"vocab_size": 2048, "d_model": 256, "n_layers": 4, "n_heads": 4, "max_seq_len": 256},
    "batch_size": 4, "seq_len": 256, "optimizer": "adamw", "precision": "fp32",
    "warmup_steps": 2, "steps": 12, "seed": 1, "device": "cpu"}}

# What must not move under load: sizes and FLOPs come from the calculators, the peak
# is live tensor bytes counted op by op (not RSS, not an allocator), and the losses
# are arithmetic on seeded inputs with a fixed thread count.
DETERMINISTIC = ["params", "tokens_per_step", "flops_per_step", "flops_per_step_6nd",
                 "memory.predicted", "memory.measured_peak_allocated", "memory.relative_error",
                 "loss_first", "loss_last", "step.iterations", "environment.cpu_threads"]
# The losses are float32 sums whose order a CPU's math library may choose differently from one run
# to the next (an audit saw loss_last take two values over four unloaded runs): equal to within this
# share of the baseline's, about a hundred float32 roundings over the 14 steps. docs/performance.md
# states it.
LOSS_REL_TOLERANCE = 1e-5
LOSSES = ("loss_first", "loss_last")
# Wall-clock figures: shown beside the baseline, for information only.
TIMINGS_S = ["step.median", "forward.median", "backward.median", "optimizer_step.median"]

# wrk's Lua: each thread cycles through the bodies (from a different start, so all
# routes are in flight together), counts every non-2xx status, and done() prints one
# JSON line that the Python side reads; latencies are wrk's own, in microseconds.
LUA = """
local bodies = {BODIES}
local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  requests_ = {}
  for i, pair in ipairs(bodies) do
    requests_[i] = wrk.format("POST", pair[1], {["Content-Type"] = "application/json"}, pair[2])
  end
  next_ = id % #requests_
  non2xx = 0
  statuses = ""
end

function request()
  next_ = next_ % #requests_ + 1
  return requests_[next_]
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    if #statuses < 200 then statuses = statuses .. status .. " " end
  end
end

function done(summary, latency, requests)
  local bad, seen = 0, ""
  for _, t in ipairs(threads) do
    bad = bad + t:get("non2xx")
    seen = seen .. t:get("statuses")
  end
  local e = summary.errors
  io.write(string.format(
    'LOAD {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, '
    .. '"non2xx": %d, "statuses": "%s", "connect": %d, "read": %d, "write": %d, "timeout": %d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    bad, seen, e.connect, e.read, e.write, e.timeout))
end
"""

TERMINAL = {"succeeded", "failed", "timeout", "oom", "crashed", "cancelled"}
# urllib honours http_proxy; an empty ProxyHandler keeps every request on loopback.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base: str, path: str, body: dict | None = None, timeout_s: float = 10) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with HTTP.open(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def start_server(port: int, tmp: Path) -> subprocess.Popen:
    # Our own settings only: a TALLY_API_TOKEN or TALLY_EMBEDDED_WORKER=false from the
    # caller's shell, or a .env in the repository (cwd is the temp dir), would break the run.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env |= {"TALLY_HOST": "127.0.0.1", "TALLY_PORT": str(port), "TALLY_LOG_LEVEL": "warning",
            "TALLY_DATABASE_PATH": str(tmp / "tally.db"), "TALLY_EMBEDDED_WORKER": "true"}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    # A session of its own: Ctrl-C reaches only this script, which then stops the server
    # with one SIGTERM (uvicorn's clean shutdown, which also stops the job's child).
    return subprocess.Popen([str(python), "-m", "app"], env=env, cwd=tmp, start_new_session=True)


def wait_ready(base: str, server: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with code {server.returncode} before it was ready")
        try:
            if call(base, "/readyz", timeout_s=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server was not ready after {timeout_s:.0f} s")


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def submit(base: str) -> int:
    status, job = call(base, "/api/v1/jobs", PROBE)
    if status != 202:
        raise SystemExit(f"POST /api/v1/jobs answered {status}: {job}")
    return job["id"]


def wait_job(base: str, job_id: int) -> dict:
    deadline = time.monotonic() + PROBE["timeout_s"] + 60
    while time.monotonic() < deadline:
        status, job = call(base, f"/api/v1/jobs/{job_id}")
        if status == 200 and job["status"] in TERMINAL:
            if job["status"] != "succeeded":
                raise SystemExit(f"job {job_id} ended {job['status']}: {job['error']}")
            return job
        time.sleep(0.5)
    raise SystemExit(f"job {job_id} did not end in time")


def seconds_of(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def field(result: dict, dotted: str):
    for key in dotted.split("."):
        result = result[key]
    return result


def write_lua(path: Path) -> None:
    def quote(text: str) -> str:
        return "[==[" + text + "]==]"  # Lua's long string: the JSON goes in verbatim
    pairs = ", ".join(f"{{{quote(p)}, {quote(json.dumps(b))}}}" for p, b in CALCULATORS.items())
    path.write_text(LUA.replace("{BODIES}", "{" + pairs + "}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=30, help="length of the load window (default 30)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument("--port", type=int, default=0,
                        help="the server's port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/load.py needs wrk, which is not on PATH (Debian/Ubuntu: apt-get install wrk)")
    if args.connections < args.threads:
        raise SystemExit("--connections must be at least --threads (wrk gives each thread its connections)")

    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="tally-load-") as tmp_name:
        tmp = Path(tmp_name)
        lua = tmp / "load.lua"
        write_lua(lua)
        server = start_server(port, tmp)
        wrk = None
        try:
            wait_ready(base, server)
            for path, body in CALCULATORS.items():  # fail fast on a body the API rejects
                status, answer = call(base, path, body)
                if status != 200:
                    raise SystemExit(f"POST {path} answered {status}: {answer}")
            alone = wait_job(base, submit(base))

            load_start_s = time.time()
            wrk = subprocess.Popen(
                ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.seconds}s", "-s", str(lua),
                 base + "/"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            loaded_id = submit(base)  # right after the load starts, so the job runs inside it
            wrk_out, _ = wrk.communicate(timeout=args.seconds + 60)
            load_end_s = time.time()
            loaded = wait_job(base, loaded_id)
        finally:
            if wrk is not None and wrk.poll() is None:
                wrk.kill()
                wrk.wait()
            stop_server(server)

    lines = [line for line in wrk_out.splitlines() if line.startswith("LOAD ")]
    if wrk.returncode != 0 or not lines:
        raise SystemExit(f"wrk failed (exit {wrk.returncode}):\n{wrk_out}")
    load = json.loads(lines[-1][5:])
    return report(args, load, load_start_s, load_end_s, alone, loaded)


def report(args, load: dict, load_start_s: float, load_end_s: float, alone: dict, loaded: dict) -> int:
    non_2xx = load["non2xx"]
    socket_errors = {kind: load[kind] for kind in ("connect", "read", "write", "timeout")}
    errors = non_2xx + sum(socket_errors.values())
    req_per_s = load["requests"] / (load["duration_us"] / 1e6)
    p50_ms, p99_ms, max_ms = load["p50_us"] / 1e3, load["p99_us"] / 1e3, load["max_us"] / 1e3
    window_s = load_end_s - load_start_s
    job_start_s, job_end_s = seconds_of(loaded["started_at"]), seconds_of(loaded["finished_at"])
    job_s = job_end_s - job_start_s
    under_load_s = max(0.0, min(job_end_s, load_end_s) - max(job_start_s, load_start_s))
    alone_s = seconds_of(alone["finished_at"]) - seconds_of(alone["started_at"])
    p, model = PROBE["params"], PROBE["params"]["model"]
    overlap = ("under load for its whole run" if under_load_s >= job_s - 0.05
               else f"under load for {under_load_s:.1f} s of it ({under_load_s / job_s:.0%})")

    print(f"Tally under load, {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}: {os.cpu_count()} CPUs, "
          f"{platform.platform()}, Python {platform.python_version()}")
    print(f"one uvicorn worker with the embedded dispatcher; wrk -t{args.threads} -c{args.connections} "
          f"-d{args.seconds}s cycling {len(CALCULATORS)} calculator routes, loopback")
    print(f"load      {req_per_s:.0f} req/s, p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms, max {max_ms:.1f} ms, "
          f"{load['requests']:,} requests")
    statuses = f" ({load['statuses'].strip()})" if load["statuses"] else ""
    print(f"errors    {errors}: non-2xx {non_2xx}{statuses}; socket "
          + ", ".join(f"{kind} {count}" for kind, count in socket_errors.items()))
    print(f"probe     train_step, GPT-style d_model {model['d_model']} x {model['n_layers']} layers, "
          f"batch {p['batch_size']} x {p['seq_len']} tokens, {p['optimizer']}, {p['precision']}, "
          f"{p['warmup_steps']}+{p['steps']} steps, seed {p['seed']}, cpu")
    print(f"job       alone {alone_s:.1f} s; under load {job_s:.1f} s, from +{job_start_s - load_start_s:.1f}"
          f" to +{job_end_s - load_start_s:.1f} s of the {window_s:.1f} s window: {overlap}")

    changed = 0
    print("result under load against the baseline (must be identical):")
    for name in DETERMINISTIC:
        a, b = field(alone["result"], name), field(loaded["result"], name)
        if a == b:
            shown = f"({len(a)} keys)" if isinstance(a, dict) else f"{a:,}"
            print(f"  {name:<32} {shown:>22}  unchanged")
        elif name in LOSSES and abs(b - a) <= LOSS_REL_TOLERANCE * abs(a):
            print(f"  {name:<32} {a:>22,}  within {LOSS_REL_TOLERANCE:g} (under load {b}, "
                  f"{abs(b - a) / abs(a):.1e} apart)")
        else:
            changed += 1
            print(f"  {name:<32} CHANGED: alone {a}, under load {b}")
    print("timings (information only)       alone    under load   ratio")
    for name in TIMINGS_S:
        a, b = field(alone["result"], name), field(loaded["result"], name)
        print(f"  {name + ' ms':<30} {a * 1e3:>8.1f}  {b * 1e3:>11.1f}  {b / a:>6.2f}")
    print(f"  {'job wall s':<30} {alone_s:>8.1f}  {job_s:>11.1f}  {job_s / alone_s:>6.2f}")

    failures = ([f"{errors} failed requests"] if errors else []) + (
        [f"{changed} deterministic fields changed"] if changed else [])
    print("FAIL: " + ", ".join(failures) if failures else "OK: no errors, deterministic result unchanged")
    return 1 if failures else 0


if __name__ == "__main__":
    # SIGTERM as SystemExit, so the finally block stops the server as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("interrupted; the server was stopped")
