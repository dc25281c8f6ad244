"""The layout search's speed target: a whole search, with the request's defaults, in under one
second on this machine, for two runs: Llama 3 70B on 1,024 H100s (128 HGX nodes, 4M-token batches
of 8,192-token sequences), and Llama 3 405B on 16,384 H100s (16M-token batches, issue 29's target:
uneven stage splits, interleavings over them and each GEMM timed from its shape). Times the
service function (what the route runs in its worker) with the engine's caches cleared and warm,
and the API route, a few rounds each, and prints layouts per second and worst / target.

    .venv/bin/python bench/plan_search.py [--rounds 5]
"""

import argparse
import statistics
import time

from fastapi.testclient import TestClient

from app.accounting import matmul
from app.accounting.plan import layout, step
from app.accounting.training import sharding, stages
from app.api.services.plan import TrainingPlanRequest, plan_training
from app.main import create_app

CASES = {
    "llama3-70b on 1024 x h100-sxm": {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 1024,
                                      "global_batch_sequences": 512, "seq_len": 8192},
    "llama3.1-405b on 16384 x h100-sxm": {"model": "llama3.1-405b", "gpu": "h100-sxm", "num_gpus": 16384,
                                          "global_batch_sequences": 2048, "seq_len": 8192},
}
TARGET_S = 1.0
# What the engine keeps between calls: a first search in a fresh process pays all their misses.
CACHES = (step._seconds, step._per_sequence, layout.refusal, stages.plan_of, sharding.layer_on_gpu,
          matmul.step_matmul)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rounds", type=int, default=5)
    args = cli.parse_args()
    client = TestClient(create_app(), base_url="http://localhost")
    for name, body in CASES.items():
        request = TrainingPlanRequest.model_validate(body)
        cold, warm, api = [], [], []
        result = None
        for _ in range(args.rounds):
            for cached in CACHES:
                cached.cache_clear()
            for times in (cold, warm):
                t = time.perf_counter()
                result = plan_training(request)
                times.append(time.perf_counter() - t)
            t = time.perf_counter()
            response = client.post("/api/v1/plan/training", json=body)
            api.append(time.perf_counter() - t)
            assert response.status_code == 200, response.text
        candidates = result.evaluated + sum(result.refused.values())
        best = result.best[0]
        print(f"{name}: {result.evaluated} layouts timed and sized, {result.fitting} fit, "
              f"{sum(result.refused.values())} refused ({candidates} candidates); fastest "
              f"{best.step_seconds:.2f} s, MFU {best.mfu:.1%}")
        for label, times in (("engine, caches cleared", cold), ("engine, caches warm", warm),
                             ("POST /api/v1/plan/training", api)):
            med, worst = statistics.median(times), max(times)
            print(f"  {label:28s} median {med * 1e3:7.1f} ms, worst {worst * 1e3:7.1f} ms; "
                  f"{result.evaluated / med:9.0f} layouts timed/s, {candidates / med:9.0f} candidates/s; "
                  f"target {TARGET_S:g} s: worst / target = {worst / TARGET_S:.2f}")


if __name__ == "__main__":
    main()
