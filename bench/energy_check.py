"""On a GPU: each probe measurement's energy (Stats.energy, read over a window of at least 0.5 s,
app/bench/energy.py) beside the same work's sustained run (sustain_s seconds, the same rule over
a window ten times longer). Where the two windows' joules per iteration agree to a few percent,
the short window is long enough; the method each used is printed beside them.

    .venv/bin/python bench/energy_check.py [--seconds 5] [--out energy-check.json]
"""

import argparse
import json
from pathlib import Path

from app.bench import bandwidth, matmul, train_step

QUIET = {"warmup_s": 0.5, "measure_s": 0.5}


def row(name: str, timed: dict, sustained: dict) -> str:
    e, s = timed["energy"], sustained["energy"]
    if e is None or s is None:
        return f"{name:<22} no energy: {timed!r:.60}"
    ratio = e["joules_per_iteration"] / s["joules_per_iteration"]
    return (f"{name:<22} {e['joules_per_iteration']:.4g} J/iter at {e['watts']:.0f} W ({e['method']}, "
            f"{e['counter_updates']} updates, {e['seconds']:.2f} s) | sustained "
            f"{s['joules_per_iteration']:.4g} J/iter at {s['watts']:.0f} W ({s['method']}, "
            f"{s['seconds']:.1f} s) | ratio {ratio:.3f}")


def quiet(*_) -> None:
    return None


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--seconds", type=float, default=5.0, help="sustain_s of each comparison run")
    cli.add_argument("--out", type=Path)
    args = cli.parse_args()
    runs = {}
    for m, k, n in ((8192, 8192, 8192), (1024, 4096, 4096)):
        runs[f"matmul bf16 {m}x{k}x{n}"] = matmul.run(
            QUIET | {"device": "cuda", "sweep": "custom", "shapes": [{"m": m, "k": k, "n": n}],
                     "dtypes": ["bfloat16"], "sustain_s": args.seconds}, quiet)
    runs["bandwidth 1 GiB copy"] = bandwidth.run(QUIET | {"device": "cuda", "sustain_s": args.seconds}, quiet)
    runs["train_step cruncher"] = train_step.run(
        QUIET | {"device": "cuda", "steps": 20, "sustain_s": args.seconds}, quiet)
    print(next(iter(runs.values()))["environment"]["energy_note"])
    for name, r in runs.items():
        timed = r["points"][0]["time"] if "points" in r else r.get("time") or r["step"]
        print(row(name, timed, r["sustained"]))
    if args.out:
        args.out.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
