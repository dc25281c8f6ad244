"""`tally accuracy`: the accuracy ledger (GET /api/v1/accuracy) as a table: per probe, metric,
device model and mode, the median error, MAPE, the worst and the count, and each pair with
--pairs. It reads this box's job database (TALLY_DATABASE_URL, or the SQLite file of `tally
serve`), or a server's with --server. Exit 0, or 2 when the request is refused."""

import argparse
import json
import sys
from typing import Any


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    cli = commands.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0])
    cli.add_argument("--server", help="read this Tally server's ledger instead of this box's database")
    cli.add_argument("--token", help="its API token (default: TALLY_API_TOKEN)")
    cli.add_argument("--probe")
    cli.add_argument("--device-model")
    cli.add_argument("--mode", choices=("datasheet", "calibrated"))
    cli.add_argument("--metric")
    cli.add_argument("--pairs", action="store_true", help="list every pair under the table")
    cli.add_argument("--output", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    given = (("probe", args.probe), ("device_model", args.device_model), ("mode", args.mode),
             ("metric", args.metric))
    query = {k: v for k, v in given if v is not None}
    if args.server:
        import httpx

        from app.config import get_settings

        settings = get_settings()
        token = args.token or (settings.api_token.get_secret_value() if settings.api_token else None)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        try:
            answer: Any = httpx.get(f"{args.server.rstrip('/')}/api/v1/accuracy", params=query,
                                    headers=headers, timeout=60)
        except httpx.HTTPError as e:
            print(f"tally accuracy: {args.server}: {e}", file=sys.stderr)
            return 2
    else:
        from app.api.build import build_api
        from app.cli import options
        from app.config import get_settings
        from app.jobs.store import Store

        settings = get_settings()
        app = build_api(settings, Store(settings.database()), routes=["app.api.routes.accuracy"])
        answer = options.call(app, "GET", "/api/v1/accuracy", params=query)
    if answer.status_code != 200:
        print(f"tally accuracy: {answer.status_code}: {answer.text}", file=sys.stderr)
        return 2
    report = answer.json()
    if args.output == "json":
        print(json.dumps(report, indent=2))
        return 0
    _print(report, args.pairs)
    return 0


def _print(report: dict, pairs: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    if not report["groups"]:
        console.print(" ".join(report["notes"]))
        return
    table = Table(title="predicted / measured - 1")
    for header in ("probe", "metric", "device model", "mode", "count", "median error", "MAPE", "worst (job)"):
        text = header in ("probe", "metric", "device model", "mode")
        table.add_column(header, justify="left" if text else "right")
    for g in report["groups"]:
        versions = ", v".join(map(str, g["profile_versions"]))
        mode = g["mode"] + (f" v{versions}" if versions else "")
        table.add_row(g["probe"], g["metric"], g["device_model"], mode, str(g["count"]),
                      f"{g['median_error']:+.1%}", f"{g['mape']:.1%}",
                      f"{g['worst_error']:+.1%} ({g['worst_job_id']})")
    console.print(table)
    if pairs:
        listed = Table(title="pairs")
        for header in ("job", "probe", "metric", "mode", "detail", "predicted", "measured", "error"):
            listed.add_column(header)
        for p in report["points"]:
            listed.add_row(str(p["job_id"]), p["probe"], p["metric"], p["mode"], p["detail"],
                           f"{p['predicted']:.4g}", f"{p['measured']:.4g}", f"{p['error']:+.1%}")
        console.print(listed)
    console.print(report["rule"])
