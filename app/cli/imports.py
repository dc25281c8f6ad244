"""`tally import`: post results run elsewhere to a Tally server.

PATH is a result file that `tally slurm`'s nodes wrote (app/bench/launched.py), or a directory
of them. Each becomes a succeeded job (POST /api/v1/import/job); with --campaign, all of them
one campaign compared device by device (POST /api/v1/import/campaign: a burn-in across a Slurm
partition). Exit 0 when every one was kept, 1 when PATH holds no result, 2 when the server
refuses one (its error on stderr)."""

import argparse
import json
import sys
from pathlib import Path


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    cli = commands.add_parser(name, help=help_text, description=__doc__.split("\n\n")[1])
    cli.add_argument("path", type=Path, help="a result file, or a directory of them (*.json)")
    cli.add_argument("--server", help="the Tally server (default: http://127.0.0.1:$TALLY_PORT)")
    cli.add_argument("--token", help="its API token (default: TALLY_API_TOKEN)")
    cli.add_argument("--campaign", action="store_true", help="keep them as one campaign (one per device)")
    cli.add_argument(
        "--outlier-fraction",
        type=float,
        default=0.10,
        help="--campaign: flag a device this far below its model's median (default: %(default)s)",
    )


def results(path: Path) -> list[dict]:
    """The result bodies at `path`, by file name."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    return [json.loads(f.read_text()) for f in files]


def run(args: argparse.Namespace) -> int:
    import httpx

    from app.config import get_settings

    settings = get_settings()
    server = (args.server or f"http://127.0.0.1:{settings.port}").rstrip("/")
    token = args.token or (settings.api_token.get_secret_value() if settings.api_token else None)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        found = results(args.path)
    except (OSError, ValueError) as e:
        print(f"tally import: {args.path}: {e}", file=sys.stderr)
        return 2
    if not found:
        print(f"tally import: no result in {args.path}", file=sys.stderr)
        return 1
    with httpx.Client(base_url=server, headers=headers, timeout=60) as client:
        if args.campaign:
            body = {
                "probe": found[0]["probe"],
                "params": found[0]["params"],
                "jobs": found,
                "outlier_fraction": args.outlier_fraction,
            }
            answer = client.post("/api/v1/import/campaign", json=body)
            if answer.status_code >= 400:
                print(f"tally import: {answer.status_code}: {answer.text}", file=sys.stderr)
                return 2
            campaign = answer.json()
            print(
                f"campaign {campaign['id']}: {len(campaign['jobs'])} jobs, "
                f"{server}/burn-in?campaign={campaign['id']}"
            )
            return 0
        for body in found:
            answer = client.post("/api/v1/import/job", json=body)
            if answer.status_code >= 400:
                print(f"tally import: {answer.status_code}: {answer.text}", file=sys.stderr)
                return 2
            job = answer.json()
            print(f"job {job['id']}: {job['probe']}, {server}/benchmarks/jobs/{job['id']}")
    return 0
