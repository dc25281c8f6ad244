"""`tally healthcheck`: GET /healthz on this box's server; the Docker HEALTHCHECK.

urllib, not curl or httpx: the image needs no extra binary, and the check must cost
little, since Docker runs it every interval for the container's whole life.
"""

import argparse
import urllib.error
import urllib.request


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    cli = commands.add_parser(
        name, help=help_text,
        description="GET http://127.0.0.1:TALLY_PORT/healthz; exit 0 when it answers 200, 1 otherwise.")
    cli.add_argument("--url", help="check this URL instead (default: http://127.0.0.1:$TALLY_PORT/healthz)")
    cli.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from app.config import get_settings

    url = args.url or f"http://127.0.0.1:{get_settings().port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            ok = response.status == 200
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: {url}: {exc}")
        return 1
    print(f"{'healthy' if ok else 'unhealthy'}: {url}")
    return 0 if ok else 1
