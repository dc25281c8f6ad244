"""`tally calibrate`: a calibration campaign (app/probes/campaign.py), then its profile.

Here by default: the campaign's jobs go through the real POST /api/v1/calibration/campaigns into a
private job store in a temporary directory, a dispatcher runs each in a fresh child on this box's
device (CUDA when there is a GPU, else the CPU), and the profile is built from them. With --server,
the campaign runs on that server's device (or, with --gpu-model, on any device of its fleet of that
model) and the profile stays there. --output writes the profile's JSON, which POST
/api/v1/calibration/import loads on any server. --held-out also runs six model shapes x three
sizes no campaign job trained, and prints each one's measured step beside the calibrated and the
datasheet answers of POST /api/v1/time/step, with the mean absolute percentage error of each.
Exit 0 when the profile was built, 1 when it could not be (the reason on stderr) or a job failed,
2 when the request is refused.
"""

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POLL_S = 0.5
Call = Callable[[str, str, dict | None], Any]
"""(method, path, JSON body or None) -> an answer with status_code, text and json()."""


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    cli = commands.add_parser(name, help=help_text, description=__doc__.split("\n\n")[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--server", help="queue the campaign on this Tally server instead of here")
    cli.add_argument("--token", help="its API token (default: TALLY_API_TOKEN)")
    cli.add_argument("--gpu", type=int, help="this box's GPU to calibrate (NVML's index)")
    cli.add_argument("--gpu-model", help="with --server: any device of the fleet of this model")
    cli.add_argument("--held-out", action="store_true", help="score the profile on the held-out train steps")
    cli.add_argument("--output", type=Path, metavar="FILE", help="write the profile's JSON here")


def run(args: argparse.Namespace) -> int:
    if args.gpu_model and not args.server:
        print("tally calibrate: --gpu-model needs --server (the fleet's devices are the server's)",
              file=sys.stderr)
        return 2
    body = {k: v for k, v in (("gpu", args.gpu), ("gpu_model", args.gpu_model)) if v is not None}
    body["held_out"] = args.held_out
    if args.server:
        return _remote(args, body)
    return _here(args, body)


def _remote(args: argparse.Namespace, body: dict) -> int:
    import httpx

    from app.config import get_settings

    settings = get_settings()
    token = args.token or (settings.api_token.get_secret_value() if settings.api_token else None)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=args.server, headers=headers, timeout=60) as client:
        try:
            return _campaign(lambda method, path, json_body: client.request(method, path, json=json_body),
                             args, body)
        except httpx.HTTPError as e:
            print(f"tally calibrate: {args.server}: {e}", file=sys.stderr)
            return 2


def _here(args: argparse.Namespace, body: dict) -> int:
    from app import device
    from app.cli import options
    from app.cli.probe import _quiet_dispatcher
    from app.config import get_settings
    from app.jobs.dispatcher import Dispatcher
    from app.jobs.store import Store
    from app.main import build_api

    with tempfile.TemporaryDirectory(prefix="tally-calibrate-") as tmp:
        private = {"database_path": Path(tmp) / "jobs.db", "database_url": None, "api_token": None}
        settings = get_settings().model_copy(update=private)
        store = Store(settings.database_path)
        app = build_api(settings, store)
        served = device.served_gpus(settings.gpus)
        gpu = args.gpu if args.gpu is not None else served[0] if served else None
        _quiet_dispatcher()
        dispatcher = Dispatcher(store, "tally-calibrate", poll_s=POLL_S / 5, gpu=gpu, served=served)
        dispatcher.start()
        try:
            return _campaign(lambda method, path, json_body: options.call(
                app, method, path, None if json_body is None else json.dumps(json_body)), args, body)
        finally:
            dispatcher.stop()


def _campaign(call: Call, args: argparse.Namespace, body: dict) -> int:
    answer = call("POST", "/api/v1/calibration/campaigns", body)
    if answer.status_code != 202:
        print(f"tally calibrate: {answer.status_code}: {answer.text}", file=sys.stderr)
        return 2
    out = answer.json()
    said = None
    while out["status"] == "running":
        line = (f"calibration {out['id']} of {out['device_model']}: {out['done']}/"
                f"{len(out['jobs']) + len(out['held_out'])} jobs ended")
        if line != said:
            print(line, file=sys.stderr, flush=True)
            said = line
        time.sleep(POLL_S)
        out = call("GET", f"/api/v1/calibration/campaigns/{out['id']}", None).json()
    every = [call("GET", f"/api/v1/jobs/{i}", None).json() for i in out["jobs"] + out["held_out"]]
    failed = [j for j in every if j["status"] != "succeeded"]
    for job in failed:
        error = job.get("error") or {}
        print(f"tally calibrate: job {job['id']} ({job['probe']}) {job['status']}: {error.get('message')}",
              file=sys.stderr)
    if out["status"] != "built":
        print(f"tally calibrate: no profile: {out['error']}", file=sys.stderr)
        return 1
    profile = call("GET", f"/api/v1/calibration/profiles/{out['profile_id']}", None).json()
    if args.output is not None:
        args.output.write_text(json.dumps(profile, indent=2) + "\n")
    _print_profile(profile)
    if args.held_out:
        _print_held_out(call, profile, out["held_out"])
    return 1 if failed else 0


UNITS = {"bytes/s": (1e-9, "GB/s"), "s": (1e6, "us"), "ratio": (1, ""), "W": (1, "W")}


def _print_profile(p: dict) -> None:
    from app.numbers import sig

    print(f"profile {p['id']}: {p['device_model']} version {p['version']}, {len(p['matmul'])} matmul shapes")
    for name in ("copy_bytes_per_s", "host_to_device_bytes_per_s", "device_to_host_bytes_per_s",
                 "launch_eager_s", "launch_graph_s", "sustained_ratio", "power_watts"):
        fig = p[name]
        if fig is not None:
            scale, unit = UNITS.get(fig["unit"], (1, fig["unit"]))
            print(f"  {name}: {sig(fig['value'] * scale)} {unit} (spread {fig['spread']:.0%}, jobs "
                  f"{', '.join(map(str, fig['jobs']))})")
    for fit in p["train_step"]:
        print(f"  train step {fit['precision']}: {sig(fit['seconds_per_op'] * 1e6)} us/op, "
              f"{sig(fit['seconds_per_activation_byte'] * 1e12)} ps/activation byte, "
              f"{sig(fit['seconds_per_optimizer_byte'] * 1e12)} ps/optimizer byte "
              f"(rms {fit['rms_relative_error']:.1%}, jobs {', '.join(map(str, fit['jobs']))})")
    for line in p["flags"]:
        print(f"  flag: {line}")
    for line in p["left_out"]:
        print(f"  left out: {line}")


def _print_held_out(call: Call, profile: dict, job_ids: list[int]) -> None:
    """Each held-out step measured beside both answers."""
    rows: list[tuple[str, float, float, float | None]] = []
    for i in job_ids:
        job = call("GET", f"/api/v1/jobs/{i}", None).json()
        if job["status"] != "succeeded":
            continue
        p = job["params"]
        asked = {k: p[k] for k in ("model", "batch_size", "seq_len", "precision", "optimizer")}
        answer = call("POST", "/api/v1/time/step", asked | {"calibration": profile["id"]}).json()
        datasheet = answer["datasheet"]["seconds"] if answer.get("datasheet") else None
        model = p["model"]
        shape = f"d={model['d_model']} L={model['n_layers']} b={p['batch_size']} s={p['seq_len']}"
        rows.append((f"job {i}: {shape}",
                     job["result"]["step"]["median"], answer["calibrated"]["seconds"], datasheet))
    if not rows:
        return
    print("held out: measured step, calibrated and datasheet answers (ms)")
    for name, m, c, d in rows:
        ds = "n/a" if d is None else f"{d * 1e3:.2f} ({d / m - 1:+.0%})"
        print(f"  {name}: {m * 1e3:.2f}, {c * 1e3:.2f} ({c / m - 1:+.0%}), {ds}")
    calibrated = sum(abs(c / m - 1) for _, m, c, _ in rows) / len(rows)
    print(f"calibrated MAPE {calibrated:.1%} over {len(rows)} steps")
    if all(d is not None for *_, d in rows):
        print(f"datasheet MAPE {sum(abs(d / m - 1) for _, m, _, d in rows) / len(rows):.1%}")
