"""What NVML reads on this host's GPUs, and what the probes' sustained runs report through it:
the inventory a fleet worker registers, then matmul (bf16, its quick sweep's best shape),
bandwidth and train_step each with sustain_s, and how often the energy counter moves. Prints a
table; --out writes the JSON.

    .venv/bin/python bench/nvml_check.py [--out docs/measurements/nvml-h200.json] [--seconds 10]
"""

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from app import device
from app.bench import bandwidth, matmul, train_step


def counter_period(uuid: str, seconds: float = 1.0) -> dict:
    """Distinct values of the total-energy counter polled every millisecond for `seconds`."""
    with device.nvml() as lib:
        handle = lib.nvmlDeviceGetHandleByUUID(uuid)
        values, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            values.append((time.perf_counter(), lib.nvmlDeviceGetTotalEnergyConsumption(handle)))
            time.sleep(0.001)
    changes = [t for (t, v), (_, w) in zip(values, values[1:], strict=False) if v != w]
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    return {"polls": len(values), "changes": len(changes),
            "median_period_s": sorted(gaps)[len(gaps) // 2] if gaps else None}


def line(name: str, s: dict) -> str:
    rate = (f"{s['flop_per_sec'] / 1e12:.1f} TFLOP/s" if s["flop_per_sec"]
            else f"{s['bytes_per_sec'] / 1e9:.0f} GB/s")
    if s["energy_joules"] is None:
        return f"{name:<11} {rate} sustained over {s['seconds']:.1f} s (no NVML)"
    watt = s["flop_per_sec_per_watt"]
    per_watt = "" if watt is None else f", {watt / 1e9:.0f} GFLOP/s/W"
    return (f"{name:<11} {rate} sustained over {s['seconds']:.1f} s, {s['average_power_watts']:.0f} W, "
            f"{s['joules_per_iteration']:.4g} J/iter{per_watt}; SM {s['sm_clock_mhz']['mean']:.0f} MHz "
            f"(min {s['sm_clock_mhz']['min']:.0f}), {s['temperature_c']['max']:.0f} C max, reasons "
            f"{ {k: round(v, 2) for k, v in s['reasons'].items()} }")


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path)
    cli.add_argument("--seconds", type=float, default=10.0)
    args = cli.parse_args()
    gpus = device.inventory()
    for g in gpus:
        print(f"gpu {g.index}: {g.name} {g.uuid} {g.memory_bytes / 2**30:.1f} GiB driver {g.driver_version} "
              f"CUDA {g.cuda_driver_version} sm_{g.compute_capability} max SM {g.max_sm_clock_mhz} MHz mem "
              f"{g.max_memory_clock_mhz} MHz power limit {g.power_limit_watts} W bus {g.pci_bus_id}")
    quiet = lambda *_: None  # noqa: E731
    runs = {
        "matmul": matmul.run({"sweep": "quick", "dtypes": ["bfloat16"], "sustain_s": args.seconds}, quiet),
        "bandwidth": bandwidth.run({"sustain_s": args.seconds}, quiet),
        "train_step": train_step.run({"model": "gpt2", "batch_size": 8, "seq_len": 1024,
                                      "precision": "bf16_autocast", "sustain_s": args.seconds}, quiet),
    }
    report = {"inventory": [asdict(g) for g in gpus], **runs}
    for name, r in runs.items():
        print(line(name, r["sustained"]))
    if gpus:
        report["counter"] = counter_period(gpus[0].uuid)
        print("energy counter:", report["counter"])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
