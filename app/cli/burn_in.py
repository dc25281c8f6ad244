"""`tally burn-in`: start a burn-in campaign on a fleet's server and print its table.

It speaks the server's JSON API over HTTP (httpx): POST /api/v1/campaigns, then GET it until every
job has ended, a line of progress on stderr meanwhile. The table: every device beside its model's
fleet median on the three sustained figures, the ones more than --outlier-fraction below flagged
with NVML's reason; then the models against the catalogue. Exit 0 when none is flagged, 1 when
one is or a job did not succeed, 2 when the server refuses the request (its error on stderr), 3
when --deadline passes first (the jobs still pending on stderr; the campaign runs on: --cancel).
"""

import argparse
import json
import sys
import time
from typing import Any

from app.numbers import per, percent, sig

POLL_S = 2.0


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    cli = commands.add_parser(name, help=help_text, description=__doc__.split("\n\n")[1])
    cli.add_argument("--server", help="the fleet's server (default: http://127.0.0.1:$TALLY_PORT)")
    cli.add_argument("--token", help="its API token (default: TALLY_API_TOKEN)")
    cli.add_argument(
        "--sustain-s", type=float, help="seconds each run is held (default: the server's, 10 on a GPU)"
    )
    cli.add_argument("--model", help="only the GPUs of this model (catalogue id, h100, or NVML's name)")
    cli.add_argument(
        "--outlier-fraction",
        type=float,
        default=0.10,
        help="flag a GPU this far below its model's median (default: %(default)s)",
    )
    cli.add_argument("--timeout", type=float, help="each job's limit in seconds (default: the server's)")
    cli.add_argument("--campaign", type=int, help="show this campaign instead of starting one")
    cli.add_argument("--deadline", type=float, metavar="SECONDS",
                     help="wait at most this long for every job to end; then exit 3, naming those pending")
    cli.add_argument("--cancel", action="store_true",
                     help="with --campaign: cancel it (its queued jobs at once, its running ones within a moment)")
    cli.add_argument("--output", choices=["table", "json"], default="table")


def run(args: argparse.Namespace) -> int:
    import httpx

    from app.config import get_settings

    settings = get_settings()
    server = args.server or f"http://127.0.0.1:{settings.port}"
    token = args.token or (settings.api_token.get_secret_value() if settings.api_token else None)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if args.cancel and args.campaign is None:
        print("tally burn-in: --cancel needs --campaign", file=sys.stderr)
        return 2
    if args.deadline is not None and args.deadline <= 0:
        print("tally burn-in: --deadline must be a positive number of seconds", file=sys.stderr)
        return 2
    deadline = None if args.deadline is None else time.monotonic() + args.deadline
    with httpx.Client(base_url=server, headers=headers, timeout=30) as client:
        try:
            if args.cancel:
                answer = client.post(f"/api/v1/campaigns/{args.campaign}/cancel")
            elif args.campaign is None:
                body: dict[str, Any] = {
                    "probe": "burn_in",
                    "outlier_fraction": args.outlier_fraction,
                    "params": {} if args.sustain_s is None else {"sustain_s": args.sustain_s},
                }
                body |= {
                    k: v for k, v in (("model", args.model), ("timeout_s", args.timeout)) if v is not None
                }
                answer = client.post("/api/v1/campaigns", json=body)
            else:
                answer = client.get(f"/api/v1/campaigns/{args.campaign}")
            if answer.status_code >= 400:
                print(f"tally burn-in: {answer.status_code}: {answer.text}", file=sys.stderr)
                return 2
            campaign = answer.json()
            said = None
            while not campaign["done"]:
                ended = sum(j["status"] not in ("queued", "running") for j in campaign["jobs"])
                said = _progress(f"campaign {campaign['id']}: {ended}/{len(campaign['jobs'])} devices done", said)
                if deadline is not None and time.monotonic() >= deadline:
                    return _past_deadline(campaign, args.deadline)
                time.sleep(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic())))
                answer = client.get(f"/api/v1/campaigns/{campaign['id']}")
                if answer.status_code >= 400:
                    print(f"\ntally burn-in: {answer.status_code}: {answer.text}", file=sys.stderr)
                    return 2
                campaign = answer.json()
        except httpx.HTTPError as e:
            print(f"tally burn-in: {server}: {e}", file=sys.stderr)
            return 2
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if args.output == "json":
        print(json.dumps(campaign, indent=2))
    else:
        _print(campaign)
    failed = [j for j in campaign["jobs"] if j["status"] != "succeeded"]
    return 1 if failed or any(row["flagged"] for row in campaign["compared"]) else 0


def _progress(line: str, said: str | None) -> str:
    """On a terminal, one line rewritten in place; elsewhere (a log, a pipe, CI) a line each time
    the count changes, never the same line every poll nor carriage returns piled into one."""
    if sys.stderr.isatty():
        print(f"\r{line}", end="", file=sys.stderr, flush=True)
    elif line != said:
        print(line, file=sys.stderr, flush=True)
    return line


def _past_deadline(campaign: dict, deadline_s: float) -> int:
    pending = [j for j in campaign["jobs"] if j["status"] in ("queued", "running")]
    print(f"\ntally burn-in: campaign {campaign['id']} still has {len(pending)} of {len(campaign['jobs'])} "
          f"jobs pending after {deadline_s:g} s (it runs on; `tally burn-in --campaign {campaign['id']} "
          "--cancel` ends it):", file=sys.stderr)
    for job in pending:
        print(f"  job {job['job_id']} on {job['device']}: {job['status']}", file=sys.stderr)
    return 3


def _print(c: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 220)
    console.print(
        f"campaign {c['id']}: {c['probe']} on {len(c['jobs'])} devices, flagged when more than "
        f"{c['outlier_fraction'] * 100:.0f}% below the model's median (sustained figures)"
    )
    table = Table()
    for i, header in enumerate(
        [
            "device",
            "host",
            "model",
            "matmul TFLOP/s",
            "x median",
            "copy GB/s",
            "x median",
            "train step TFLOP/s",
            "x median",
            "matmul W",
            "flag",
        ]
    ):
        table.add_column(header, justify="left" if i < 3 or i == 10 else "right")
    for row in c["compared"]:
        m, r = row["metrics"], row["ratio"]
        flag = (
            f"SLOW {row['shortfall'] * 100:.0f}%: " + (", ".join(row["reasons"]) or "no reason given")
            if row["flagged"]
            else ""
        )
        table.add_row(
            row["device"],
            row["host"] or "-",
            row["model"],
            per(m["matmul_flop_per_sec"], 1e12),
            sig(r["matmul_flop_per_sec"]),
            per(m["bandwidth_bytes_per_sec"], 1e9),
            sig(r["bandwidth_bytes_per_sec"]),
            per(m["train_step_flop_per_sec"], 1e12),
            sig(r["train_step_flop_per_sec"]),
            sig(row["watts"].get("matmul")),
            flag,
        )
    console.print(table)
    for job in c["jobs"]:
        if job["status"] != "succeeded":
            console.print(f"job {job['job_id']} on {job['device']}: {job['status']}")
    models = Table(title="models against the catalogue (medians)")
    for i, header in enumerate(
        [
            "model",
            "GPUs",
            "matmul TFLOP/s",
            "of peak",
            "copy GB/s",
            "of catalogue",
            "train step MFU",
            "GFLOP/s per W",
            "flagged",
        ]
    ):
        models.add_column(header, justify="left" if i == 0 else "right")
    for m in c["leaderboard"]:
        models.add_row(
            m["model"],
            str(m["gpus"]),
            per(m["matmul_flop_per_sec"], 1e12),
            percent(m["matmul_fraction_of_peak"]),
            per(m["bandwidth_bytes_per_sec"], 1e9),
            percent(m["bandwidth_fraction_of_catalogue"]),
            percent(m["train_step_mfu"]),
            per(m["matmul_flop_per_sec_per_watt"], 1e9),
            str(m["flagged"]),
        )
    console.print(models)
