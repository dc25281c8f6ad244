"""`tally calc GROUP ACTION`: every calculator of the JSON API, from the shell.

The commands are read from the API's route table (app/api/router.py), every /api/v1 route
except the server's own jobs and device: GROUP is the path's first segment, ACTION the
rest (flops transformer, memory max-model), or `list` and `get NAME` for the catalogue
reads. A POST to the group's path itself (/fit, /finetune) is the group's one command, with
no ACTION: `tally calc fit --model ...`. A route's body model gives its options. Each call
goes through the real routes and error handlers in process, so answers and messages are the
HTTP API's, byte for byte.

Importing every route module costs more than a second of CPU, so the commands come from
app/cli/calc_table.py, written from the route table by `python -m app.cli.calc` and checked
against it by tests/api/test_cli_table.py. `tally calc --help` imports no route; a command's help
imports its body model only, and a call the route modules of its group only
(bench/cli_speed.py).
"""

import argparse
import atexit
import gc
import importlib
import inspect
import pprint
import sys
import tempfile
import textwrap
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cli import options

# Routes that need the server's job store or its device: not calculators.
SERVER_ONLY = ("app.api.routes.jobs", "app.api.routes.device", "app.api.routes.calibration",
               "app.api.routes.accuracy", "app.api.routes.imports")
EXAMPLES = """examples:
  tally calc fit --model llama3-8b --gpu rtx-4090 --seq-len 2048
  tally calc finetune --model llama3-8b --mode qlora --gpu rtx-4090 --seq-len 2048 --recompute full
  tally calc flops transformer --model llama3-8b --seq-len 8192 --causal halved
  tally calc memory max-model --gpu h100-sxm --num-gpus 8 --precision fp32 --optimizer adamw
  tally calc time training --params 70e9 --tokens 15e12 --gpu h100-sxm --num-gpus 1024 --mfu 0.5
  tally calc energy --gpu-hours 184320 --gpu a100-80gb --pue 1.1 --region us-average
  tally calc inference time --model llama3.1-70b --weight-format fp8 --gpu h100-sxm --num-gpus 2 \\
      --tensor-parallel 2
  tally calc inference capacity --model llama3.1-8b --gpu l4 --context 8k --concurrency 4
  tally calc data dataset --tokens 1.4T --vocab-size 32000 --shard-bytes 1GB
  tally calc checkpoint --model llama3-8b --write-bytes-per-s 2GB --read-bytes-per-s 2GB \\
      --every-n-steps 1000 --step-seconds 1.5
  tally calc dtypes encode --value 0.15625 --dtype float32
  tally calc models import --json @config.json
  tally calc hardware get h100-sxm"""


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    options.add_deferred(commands, name, help_text)


@dataclass
class Calculator:
    group: str
    action: str
    """"" for a POST to the group's own path (/fit): the command is the group alone."""
    method: str
    path: str
    """Under /api/v1, with {placeholders} for the path parameters."""
    summary: str
    description: str
    path_params: list[str]
    query_params: list[str]
    body: str | None
    """Where the body's pydantic model is, "module:QualName"; None when the body is free-form
    JSON or there is none. Imported by `model()`, for this command's options only."""
    takes_body: bool
    body_help: str
    module: str
    """The route module that serves it."""
    group_help: str
    """The first line of the docstring of the module named for its group, or else of its own
    (quantization, in app/api/routes/inference.py)."""

    @property
    def command(self) -> str:
        """What follows `tally calc`: 'flops transformer', or 'fit' for a group's one command."""
        return f"{self.group} {self.action}".strip()

    def model(self) -> type | None:
        if self.body is None:
            return None
        module, _, name = self.body.partition(":")
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        return found


def table() -> list[Calculator]:
    """The calculators as app/cli/calc_table.py lists them, read without importing a route."""
    from app.cli.calc_table import CALCULATORS

    return [Calculator(*row) for row in CALCULATORS]


def calculators() -> list[Calculator]:
    """One per calculator route, sorted by group and action (as `tally calc --help` lists them),
    read from the route table itself: every route module imported. What `table()` is written from."""
    from pydantic import BaseModel

    from app.api.router import MODULES, PREFIX, modules

    found = []
    docs = {m.rsplit(".", 1)[-1]: _first_line(importlib.import_module(m)) for m in MODULES}
    for module in modules(m for m in MODULES if m not in SERVER_ONLY):
        for route in module.router.routes:
            (method,) = route.methods
            parts = [p for p in route.path.split("/") if p]
            path_params = [p.name for p in route.dependant.path_params]
            action = "-".join(p for p in parts[1:] if not p.startswith("{"))
            if not action and method == "GET":
                action = "get" if path_params else "list"
            bodies = route.dependant.body_params
            model = bodies[0].field_info.annotation if len(bodies) == 1 else None
            description = inspect.cleandoc(route.description or "")
            found.append(Calculator(
                group=parts[0], action=action, method=method, path=PREFIX + route.path,
                summary=route.summary or description.split("\n\n")[0].replace("\n", " "),
                description=description, path_params=path_params,
                query_params=[p.name for p in route.dependant.query_params],
                body=(f"{model.__module__}:{model.__qualname__}"
                      if isinstance(model, type) and issubclass(model, BaseModel) else None),
                takes_body=bool(bodies),
                body_help=(bodies[0].field_info.description or "") if bodies else "",
                # A group without a module of its own (quantization, in the inference module): its
                # route's own summary, not its neighbour's module docstring.
                module=module.__name__, group_help=docs.get(parts[0]) or (
                    route.summary or description.split("\n\n")[0].replace("\n", " "))))
    # A group's own path beside named actions (a later /finetune/compare) takes its method as
    # its action, as argparse cannot make the ACTION optional.
    crowded = {c.group for c in found if c.action} & {c.group for c in found if not c.action}
    for c in found:
        if c.group in crowded and not c.action:
            c.action = c.method.lower()
    # One path read and written (/calibration/profiles: POST builds, GET lists, GET {id} exports):
    # the writer keeps the name, a read takes -list or -get after it.
    named = [(c.group, c.action) for c in found]
    for c in found:
        if named.count((c.group, c.action)) > 1 and c.method == "GET":
            c.action += "-get" if c.path_params else "-list"
    return sorted(found, key=lambda c: (c.group, c.action))


def _first_line(module: Any) -> str:
    return (module.__doc__ or "").strip().split("\n")[0]


def table_text(calcs: list[Calculator]) -> str:
    """app/cli/calc_table.py, listing `calcs`: one tuple of Calculator's fields each."""
    rows = "".join(f"    {pprint.pformat(tuple(vars(c).values()), width=105, compact=True)},\n".replace(
        "\n ", "\n     ") for c in calcs)
    fields = textwrap.fill(", ".join(Calculator.__dataclass_fields__), 100, initial_indent="# Calculator's ",
                           subsequent_indent="# ")
    return ('"""Every calculator of `tally calc`, read from the API\'s route table: written by\n'
            '`python -m app.cli.calc`, checked by tests/api/test_cli_table.py. Do not edit."""\n\n'
            f"{fields}\nCALCULATORS = [\n{rows}]\n")


def _listing(calcs: list[Calculator]) -> str:
    width = max(len(c.command) for c in calcs) + 2
    return "\n".join(f"  {c.command:<{width}}{c.summary}" for c in calcs)


def chosen(calcs: list[Calculator], argv: list[str]) -> Calculator | None:
    """The calculator `argv` names (GROUP, or GROUP ACTION, first), if it names one: the one
    command whose options the parser needs."""
    for calc in calcs:
        if argv[:1] == [calc.group] and (not calc.action or argv[1:2] == [calc.action]):
            return calc
    return None


def parser(calcs: list[Calculator], full: Calculator | None = None) -> argparse.ArgumentParser:
    """`tally calc`'s parser: every command, with the options of `full` only (its body model
    imported); the others parse nothing, and no other help shows their options."""
    raw = argparse.RawDescriptionHelpFormatter
    cli = argparse.ArgumentParser(
        prog="tally calc", formatter_class=raw,
        description=options.wrap(
            "Run a calculator of the JSON API (/api/v1) here, without a server: the response JSON on "
            "stdout, indented (--compact: one line, as the API sent it). A refused request prints "
            "the API's error JSON, {\"message\", \"detail\"}, on stderr and exits 2.") + "\n\n"
            "calculators (`tally calc GROUP [ACTION] --help` lists each one's options):\n" + _listing(calcs),
        epilog=EXAMPLES)
    groups = cli.add_subparsers(dest="group", required=True, metavar="GROUP")
    by_group: dict[str, argparse._SubParsersAction] = {}
    for calc in calcs:
        said = calc.group_help
        if not calc.action:  # the group's one command: its options on the group itself
            described = f"{said}\n\n{calc.method} {calc.path}\n\n{calc.description}"
            sub = groups.add_parser(calc.group, help=said, formatter_class=raw, description=described,
                                    epilog=_epilog(calc))
        else:
            if calc.group not in by_group:
                group = groups.add_parser(calc.group, help=said, description=said)
                by_group[calc.group] = group.add_subparsers(dest="action", required=True, metavar="ACTION")
            sub = by_group[calc.group].add_parser(
                calc.action, help=calc.summary, formatter_class=raw,
                description=f"{calc.method} {calc.path}\n\n{calc.description}", epilog=_epilog(calc))
        if calc is full:
            _command(sub, calc)
    return cli


def _epilog(calc: Calculator) -> str | None:
    return options.wrap(options.VALUES_HELP) if calc.takes_body else None


def _command(sub: argparse.ArgumentParser, calc: Calculator) -> None:
    """The arguments of one calculator: its path parameters, query parameters and body fields."""
    for name in calc.path_params:
        listed = f" (`tally calc {calc.group} list` lists them)" if calc.action == "get" else ""
        sub.add_argument(name, metavar=name.upper(), help=f"the {{{name}}} of {calc.path}{listed}")
    for name in calc.query_params:
        sub.add_argument(f"--{name.replace('_', '-')}", dest=f"query:{name}", help="query parameter")
    model = calc.model()
    fields = [] if model is None else options.add_fields(sub, model, f"body fields ({calc.path})")
    sub.set_defaults(calc=calc, fields=fields)
    if calc.takes_body:
        options.add_json(sub, "the whole request body", "" if calc.body else calc.body_help)
    sub.add_argument("--compact", action="store_true", help="one line: the API's JSON as it came")
    from app.cli.calc_faces import FACES

    if calc.path in FACES:
        said = FACES[calc.path].__doc__.split(" (")[0].lower()
        sub.add_argument("--table", action="store_true", help=f"print {said} as a table, in place of the JSON")


class _StoreOnDemand:
    """app.state.store for the calculators: only a measured figure (`mfu: "measured"`) and the
    fleet's reads open it, to find this device's calibration. That reads TALLY_DATABASE_URL, or
    TALLY_DATABASE_PATH when it exists; otherwise an empty store in a temporary directory, so a
    calculation never creates a database file.

    The app is built without the database's error handlers (their SQLAlchemy costs 0.1 s of CPU):
    opening the store adds them to the table the request in flight looks its exceptions up in,
    so a failing database answers as the server's does."""

    def __init__(self, database: str | Path) -> None:
        self.database, self._store, self._tmp = database, None, None
        self.app: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._store is None:
            self._handle_database_errors()
            from app.jobs.store import Store

            if not isinstance(self.database, Path) or self.database.exists():
                self._store = Store(self.database)
            else:
                self._tmp = tempfile.TemporaryDirectory(prefix="tally-calc-")
                self._store = Store(Path(self._tmp.name) / "empty.db")
        return getattr(self._store, name)

    def _handle_database_errors(self) -> None:
        from starlette.middleware.exceptions import ExceptionMiddleware

        from app.api import errors

        layer = self.app.middleware_stack  # built by the request in flight
        while not isinstance(layer, ExceptionMiddleware):
            layer = layer.app
        for error, handler in errors.database_handlers().items():
            layer.add_exception_handler(error, handler)
            self.app.add_exception_handler(error, handler)


def run(args: argparse.Namespace) -> int:
    # Garbage collection: importing the models and building the routes makes thousands of
    # objects that live as long as the process, and each collection rescans them all; run while
    # they are made, during the call, or by the interpreter on its way out, it took a third of a
    # call's CPU (bench/cli_speed.py). So none runs until the app is built, the call's skip what
    # existed before it (gc.freeze), and the exit's skip all: what is alive then dies with the
    # process. Unfrozen after the call, for a caller that goes on (the tests, many commands).
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    gc.disable()
    try:
        calcs = table()
        cli = parser(calcs, chosen(calcs, args.argv))
        opts = cli.parse_args(args.argv)
        app = _app(calcs, opts.calc, _path(opts))
    finally:
        gc.enable()
    gc.freeze()
    try:
        return _answer(cli, opts, app)
    finally:
        gc.unfreeze()


def _answer(cli: argparse.ArgumentParser, opts: argparse.Namespace, app: Any) -> int:
    """The command's request to `app`; its answer printed, and the exit status."""
    calc: Calculator = opts.calc
    path = _path(opts)
    query = {n: v for n in calc.query_params if (v := vars(opts)[f"query:{n}"]) is not None}
    content = None
    if calc.takes_body:
        raw = None if opts.json is None else options.read_json(cli, opts.json)
        content = options.merge(raw, options.given(opts, opts.fields))
    response = options.call(app, calc.method, path, content, query or None)
    ok = response.status_code < 300
    if ok and getattr(opts, "table", False):
        from rich.console import Console

        from app.cli.calc_faces import FACES

        console = Console()
        for part in FACES[calc.path](response.json()):
            console.print(part)
        return options.exit_status(response.status_code)
    options.print_json(response.text, opts.compact, sys.stdout if ok else sys.stderr)
    return options.exit_status(response.status_code)


def _path(opts: argparse.Namespace) -> str:
    """The request's path: the calculator's, its placeholders filled from the arguments."""
    path = opts.calc.path
    for name in opts.calc.path_params:
        path = path.replace(f"{{{name}}}", urllib.parse.quote(getattr(opts, name), safe=""))
    return path


def _app(calcs: list[Calculator], calc: Calculator, path: str) -> Any:
    """The API that routes a request for `path`: the routes of `calc`'s group (its route
    modules) that match it. It answers as the whole API (app/api/build.py)."""
    from app.api.build import build_api
    from app.api.compute import Compute
    from app.config import get_settings

    settings = get_settings()
    store = _StoreOnDemand(settings.database())
    # Inline: one request, nothing beside it to stall, and no worker pool worth starting.
    store.app = build_api(settings, store, routes={c.module for c in calcs if c.group == calc.group},
                          path=urllib.parse.unquote(path), database=False,
                          compute=Compute.of(settings, inline=True))
    return store.app


if __name__ == "__main__":  # python -m app.cli.calc: rewrite app/cli/calc_table.py from the routes
    Path(__file__).with_name("calc_table.py").write_text(table_text(calculators()))
