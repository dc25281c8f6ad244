"""The layout search's speed target: llama3-70b on 1,024 H100s (128 HGX nodes), 4M-token batches
of 8,192-token sequences, searched whole in under one second on this machine. Times the engine's
search and the API route in one run, a few rounds each, and prints layouts per second.

    .venv/bin/python bench/plan_search.py [--rounds 5]
"""

import argparse
import statistics
import time

from fastapi.testclient import TestClient

from app.accounting import hardware, models
from app.accounting.plan import layout, step, training
from app.accounting.plan.search import Limits
from app.accounting.plan.step import Workload
from app.accounting.training import memory, sharding
from app.main import create_app

BODY = {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 1024, "global_batch_sequences": 512,
        "seq_len": 8192}
TARGET_S = 1.0
# What the engine keeps between calls: a first search in a fresh process pays all their misses.
CACHES = (step._seconds, step._per_sequence, layout.refusal, memory._plan, sharding._layer_on_gpu)


def workload() -> Workload:
    acc = hardware.gpu("h100-sxm")
    cluster, _ = training.cluster(acc, num_gpus=1024, gpus_per_node=None, intra=(None, None),
                                  inter=(None, None))
    return Workload(models.preset("llama3-70b"), acc, cluster, global_batch=512, seq_len=8192,
                    precision="bf16_mixed", optimizer="adamw",
                    peak_flop_per_sec=hardware.peak_flop_per_sec(acc, memory.PEAK_DTYPE["bf16_mixed"]),
                    compute_efficiency=0.5)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rounds", type=int, default=5)
    args = cli.parse_args()
    w = workload()
    cold, warm, api = [], [], []
    result = None
    client = TestClient(create_app(), base_url="http://localhost")
    for _ in range(args.rounds):
        for cached in CACHES:
            cached.cache_clear()
        for times in (cold, warm):
            t = time.perf_counter()
            result = training.plan(w, Limits(), top_k=5, points=False, links=("", ""))
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        response = client.post("/api/v1/plan/training", json=BODY)
        api.append(time.perf_counter() - t)
        assert response.status_code == 200, response.text
    candidates = result.evaluated + sum(result.refused.values())
    print(f"llama3-70b on 1024 x h100-sxm: {result.evaluated} layouts timed and sized, {result.fitting} fit, "
          f"{sum(result.refused.values())} refused ({candidates} candidates)")
    for name, times in (("engine, caches cleared", cold), ("engine, caches warm", warm),
                        ("POST /api/v1/plan/training", api)):
        med, worst = statistics.median(times), max(times)
        print(f"{name:28s} median {med * 1e3:7.1f} ms, worst {worst * 1e3:7.1f} ms; "
              f"{result.evaluated / med:9.0f} layouts timed/s, {candidates / med:9.0f} candidates/s; "
              f"target {TARGET_S:g} s: worst / target = {worst / TARGET_S:.2f}")


if __name__ == "__main__":
    main()
