"""The `tally` command: `tally serve` (server with the embedded worker) and
`tally worker` (a dispatcher alone, against the same database)."""

import argparse

from app.jobs import worker


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="tally", description="Deep-learning resource accounting.")
    commands = cli.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", help="serve the API and pages, with the embedded job dispatcher "
                                      "(TALLY_EMBEDDED_WORKER=false to run `tally worker` instead)")
    commands.add_parser("worker", parents=[worker.parser()], add_help=False,
                        help="run queued benchmark jobs, one at a time, against TALLY_DATABASE_PATH")
    args = cli.parse_args(argv)
    if args.command == "serve":
        from app.__main__ import main as serve
        serve()
        return 0
    return worker.start(args)


if __name__ == "__main__":
    raise SystemExit(main())
