"""The `tally` command. Each subcommand lives in its own module here and offers two
functions: `add(commands, name, help)` registers its parser, `run(args)` runs it and
returns the exit status. Each keeps its heavy imports (the app, torch-free as it is)
inside `run`, so `tally --help` and `tally healthcheck` stay quick; and only the command
named is registered by its module, the others by name and help alone, so `tally calc` pays
for no other command's parser (bench/cli_speed.py).

Exit status: 0 success, 1 the work failed (a probe that failed, a server that did
not answer), 2 bad usage or input (argparse's own convention).
"""

import argparse
import importlib
import sys

# name -> (module, one-line help). The order is the order `tally --help` lists them.
COMMANDS = {
    "serve": ("app.cli.serve", "serve the API and dashboard, with one embedded job dispatcher per GPU"),
    "worker": ("app.cli.worker", "run queued benchmark jobs against the server's database (no HTTP)"),
    "healthcheck": ("app.cli.healthcheck", "exit 0 when the local server answers /healthz "
                                           "(the Docker HEALTHCHECK; needs no curl)"),
    "calc": ("app.cli.calc", "run any calculator of the JSON API here, JSON out (`tally calc --help` "
                             "lists them)"),
    "probe": ("app.cli.probe", "run one benchmark probe on this box's device, with a progress bar "
                               "and a table"),
    "calibrate": ("app.cli.calibrate", "run a calibration campaign on this box's device (or a server's), "
                                       "build its profile, and score it on held-out train steps"),
    "accuracy": ("app.cli.accuracy", "how close Tally's predictions came to this fleet's measurements (the "
                                     "accuracy ledger), per probe, metric, device model and mode"),
    "burn-in": ("app.cli.burn_in", "burn in every GPU of a fleet through its server, and print which are "
                                   "slow"),
    "slurm": ("app.cli.slurm", "run a probe across a Slurm allocation (srun and torchrun's rendezvous, no "
                               "MPI), and post its result to a server"),
    "import": ("app.cli.imports", "post results run elsewhere (by `tally slurm`) to a Tally server"),
}


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `tally`, with the options of the command `argv` names (its first word)."""
    cli = argparse.ArgumentParser(
        prog="tally",
        description="Tally: deep-learning resource accounting. FLOPs, bytes and seconds a model costs "
                    "to train, and how close this box's device comes to its vendor's peaks.",
        epilog="Settings come from TALLY_* environment variables or a .env file (see the README). "
               "`tally COMMAND --help` describes each command.")
    commands = cli.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = (sys.argv[1:] if argv is None else argv)[:1]
    for name, (module, help_text) in COMMANDS.items():
        if [name] == named:
            importlib.import_module(module).add(commands, name, help_text)
        else:  # never parsed: a command's parser is reached only as the first word
            commands.add_parser(name, help=help_text)
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser(argv).parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).run(args)
