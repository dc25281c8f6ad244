"""A calibration profile built from probe results recorded as JSON (docs/measurements/), for a
device this machine does not have: each result is stored as a finished job in a throw-away store,
then app/measured/profile.py builds the profile as a server would. A train_step result's params
are its own fields (a preset model, batch, sequence, precision, optimizer); a cruncher's or a
compiled run's are left out, as the step fit leaves them out on a server.

    .venv/bin/python bench/profile_from_results.py docs/measurements/gpu-targets-h200.json \
        docs/measurements/probe-suite-h200.json --out docs/measurements/profile-h200.json

Then POST /api/v1/calibration/import loads the file on any server.
"""

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from app.api.services.calibration import PROFILE
from app.jobs.store import Store
from app.measured import profile as builder
from app.probes.registry import PROBES, RESULTS


def results(value: Any) -> list[dict]:
    """Every probe result in a recorded file, however deep: a dict with a known `probe` and an
    `environment`."""
    if isinstance(value, dict):
        if value.get("probe") in PROBES and "environment" in value:
            return [value]
        return [r for v in value.values() for r in results(v)]
    if isinstance(value, list):
        return [r for v in value for r in results(v)]
    return []


def params_of(result: dict) -> dict:
    if result["probe"] != "train_step":
        return {}
    return {k: result[k] for k in ("model", "batch_size", "seq_len", "precision", "optimizer")} | {
        "mode": result.get("mode", "full"), "compile": bool(result.get("compiled"))}


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("files", nargs="+", type=Path)
    cli.add_argument("--out", type=Path, required=True)
    args = cli.parse_args()
    found = [r for f in args.files for r in results(json.loads(f.read_text()))]
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "jobs.db")
        for raw in found:
            job = store.submit(probe=raw["probe"], params=params_of(raw), timeout_s=60, limit=10_000)
            store.claim(worker_id="recorded")
            store.finish(job.id, status="succeeded", result=RESULTS.validate_python(raw))
        models = {r["environment"]["device_name"] for r in found}
        assert len(models) == 1, f"results from several devices: {models}"
        profile = builder.build(store, models.pop(), version=1)
    args.out.write_text(PROFILE.dump_json(profile, indent=2).decode() + "\n")
    print(f"{args.out}: {profile.device_model}, {len(profile.matmul)} matmul shapes, "
          f"train step fits {[f.precision for f in profile.train_step]}, {len(profile.left_out)} left out")
    for line in profile.flags + profile.left_out:
        print(f"  {line}")


if __name__ == "__main__":
    main()
