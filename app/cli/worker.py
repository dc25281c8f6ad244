"""`tally worker`: a dispatcher alone (app/jobs/worker.py holds its options and loop)."""

import argparse


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    from app.jobs import worker
    commands.add_parser(name, parents=[worker.parser()], add_help=False, help=help_text,
                        description=worker.parser().description)


def run(args: argparse.Namespace) -> int:
    from app.jobs import worker
    return worker.start(args)
