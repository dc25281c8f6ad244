"""Every registered probe once, at its device's default sizes, each in its own child exactly as
the worker runs it (python -m app.bench.child); one line per probe, and the results as JSON.

    .venv/bin/python bench/probe_suite.py [--out docs/measurements/suite-h200.json] [--only matmul,...]
"""

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.probes.registry import PROBES


def run(name: str, params: dict, timeout_s: float) -> tuple[dict, float]:
    """The child's last message (a result or an error) and its wall time in seconds. Its stdin
    stays open while it runs: end-of-file there tells a child that its parent died."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "app.bench.child"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(timeout_s, child.kill)
    killer.start()
    child.stdin.write(json.dumps({"job_id": 0, "probe": name, "params": params}) + "\n")
    child.stdin.flush()
    last = None
    for line in child.stdout:
        message = json.loads(line)
        if message["type"] != "progress":
            last = message
            break
    child.stdin.close()
    stderr = child.stderr.read()
    child.wait()
    killer.cancel()
    if last is None:
        last = {"type": "error", "error": {"message": f"exit {child.returncode}: {stderr[-2000:]}"}}
    return last, time.perf_counter() - start


def headline(name: str, r: dict) -> str:
    """The figure each probe is for."""
    if name == "matmul":
        return ", ".join(f"{d} {b['flop_per_sec'] / 1e12:.1f} TFLOP/s at {b['m']}x{b['k']}x{b['n']}"
                         for d, b in r["best"].items() if b)
    if name == "bandwidth":
        return (f"{r['gb_per_sec']:.1f} GB/s (best {r['best_gb_per_sec']:.1f}, "
                f"catalogue {r['catalogue_gb_per_sec']})")
    if name == "transfer":
        top = max(r["points"], key=lambda p: p["size_bytes"])["size_bytes"]
        return ", ".join(f"{p['direction']} {p['host_memory']} {p['gb_per_sec']:.1f} GB/s"
                         for p in r["points"] if p["size_bytes"] == top and not p["non_blocking"])
    if name == "train_step":
        return f"{r['model']} MFU {r['mfu']}, memory error {r['memory']['relative_error']:+.3f}"
    if name == "generate":
        return "; ".join(f"b{d['batch_size']} ctx{d['context']} err {d['predicted']['relative_error']:+.3f}"
                         for d in r["decode"])
    if name == "collectives":
        return (f"{r['backend']} x{r['ranks']}, check passed {r['check_passed']}, "
                f"fits {json.dumps(r['fits'])[:200]}")
    if name == "data_parallel_step":
        return (f"{r['strategy']} {r['backend']} x{r['ranks']}, step {r['step']['median'] * 1e3:.1f} ms, "
                f"scaling {r['scaling_efficiency']:.2f}, memory error {r['memory']['relative_error']:+.3f}")
    if name == "data_loader":
        return (", ".join(f"{m['mode']} {m['tokens_per_sec']:,.0f} tokens/s (headroom {m['headroom']:.3g})"
                          for m in r["modes"]) + f"; train step {r['train_tokens_per_s']:,.0f} tokens/s "
                f"({r['train_source']})")
    if name == "checkpoint":
        return (f"{r['file_bytes']:,} bytes vs {r['predicted_bytes']:,} predicted "
                f"({r['relative_error']:+.4f}), write {r['write_bytes_per_s'] / 1e9:.3g} GB/s, "
                f"read {r['read_bytes_per_s'] / 1e9:.3g} GB/s "
                f"({r['read_cache']})")
    return json.dumps(r)[:300]


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path)
    cli.add_argument("--only", help="comma-separated probe names")
    cli.add_argument("--timeout", type=float, default=240)
    args = cli.parse_args()
    names = args.only.split(",") if args.only else list(PROBES)
    report = {}
    for name in names:
        message, seconds = run(name, {}, args.timeout)
        report[name] = message | {"wall_s": seconds}
        if message["type"] == "result":
            print(f"{name:<20} {seconds:6.1f} s  {headline(name, message['result'])}", flush=True)
        else:
            print(f"{name:<20} {seconds:6.1f} s  error: {message['error']['message'][:300]}", flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
