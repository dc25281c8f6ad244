"""`tally calc`'s quick path: its command table (app/cli/calc_table.py) is the API's route table,
the app it builds for one command routes that command's group as the whole API does, every
calculator answers and refuses as the whole API does, byte for byte, and a command imports only
what it uses. The CPU seconds themselves are bench/cli_speed.py's: too noisy on a shared machine
to assert."""

import gc
import json
import subprocess
import sys
import textwrap
import urllib.parse
from collections import defaultdict
from pathlib import Path

import pytest
import sqlalchemy.exc

from app.api import router
from app.cli import calc, calc_table, options
from app.config import get_settings
from app.jobs.store import Store
from app.main import create_app
from tests.api.test_cli import ROOT, run_main
from tests.conftest import Api

CALCULATORS = calc.table()


def test_the_command_table_is_the_route_table():
    written = Path(calc_table.__file__).read_text()
    assert written == calc.table_text(calc.calculators()), (
        "app/cli/calc_table.py is not the route table's: rewrite it with `python -m app.cli.calc`")


def test_each_group_is_one_route_modules():
    """A command's app holds the route modules of its group only. It routes that group's paths
    as the whole table does while no other module's route can match them: every path's first
    segment is fixed, and one module's."""
    owners = defaultdict(set)
    for module in router.modules():
        for route in module.router.routes:
            first = route.path.split("/")[1]
            assert first and not first.startswith("{"), route.path
            owners[first].add(module.__name__)
    assert all(len(modules) == 1 for modules in owners.values()), owners
    assert all(owners[c.group] == {c.module} for c in CALCULATORS)


@pytest.fixture(scope="module")
def whole():
    """The server's app, over the database the CLI reads (the tests' TALLY_DATABASE_PATH)."""
    api = Api(create_app(get_settings()))
    yield api, api.app.openapi()
    api.close()


def _example(operation: dict) -> tuple[dict, dict]:
    """The first OpenAPI example of an operation's body ({} without one) and of each path parameter."""
    examples = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("examples")
    body = next(iter(examples.values()))["value"] if examples else {}
    params = {p["name"]: next(iter(p.get("examples", {"": {"value": "x"}}).values()))["value"]
              for p in operation.get("parameters", []) if p["in"] == "path"}
    return body, params


def _same(capsys, whole_api, c: calc.Calculator, body: dict | None, params: dict) -> tuple[int, str]:
    """`tally calc` and the whole API on one request: the same status and the same bytes."""
    argv = [*c.command.split(), *(str(params[name]) for name in c.path_params), "--compact"]
    if c.takes_body:
        argv += ["--json", json.dumps(body)]
    status, out, err = run_main(capsys, "calc", *argv)
    path = c.path.format(**{name: urllib.parse.quote(str(value), safe="") for name, value in params.items()})
    sent = {} if body is None else {"content": json.dumps(body),
                                    "headers": {"content-type": "application/json"}}
    expected = whole_api.request(c.method, path, **sent)
    assert status == options.exit_status(expected.status_code), argv
    assert (out if status == 0 else err) == expected.text + "\n", argv
    return status, expected.text


@pytest.mark.parametrize("c", CALCULATORS, ids=lambda c: c.command)
def test_every_calculator_answers_as_the_whole_api(capsys, whole, c):
    """Its OpenAPI example, and a body with a key no model has: the answer and the refusal."""
    whole_api, document = whole
    body, params = _example(document["paths"][c.path][c.method.lower()])
    status, _ = _same(capsys, whole_api, c, body if c.takes_body else None, params)
    if c.takes_body and c.body is not None:
        assert status == 0 or c.group == "campaigns"  # no live device to run a campaign on
        status, text = _same(capsys, whole_api, c, {**body, "no_such_field": 1}, params)
        assert status == 2 and "no_such_field" in json.loads(text)["message"]


@pytest.mark.parametrize(("command", "value"), [
    ("models get", "import"),  # the path of POST /models/import too: that route matches, but not its method
    ("hardware get", ""),  # no route matches /hardware/; /hardware does (Starlette redirects)
    ("hardware get", "a/b"),  # quoted: one segment, no route's
    ("dtypes get", "../hardware"),
])
def test_paths_near_other_routes_are_routed_as_the_whole_api(capsys, whole, command, value):
    """A command's app has only the routes that match its path (with or without a trailing
    slash): the ones that take part in routing it, so its answer is the whole table's."""
    c = next(c for c in CALCULATORS if c.command == command)
    _same(capsys, whole[0], c, None, {c.path_params[0]: value})


def test_a_failing_database_is_the_servers_503(capsys, monkeypatch):
    """The app of a command opens the store on demand and adds the database's error handlers
    then (their SQLAlchemy is not imported before): a failing database is still a JSON 503."""
    def locked(*_, **__):
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))

    monkeypatch.setattr(Store, "campaigns", locked)
    status, out, err = run_main(capsys, "calc", "campaigns", "list", "--compact")
    assert (status, out) == (1, "")
    answer = json.loads(err)
    assert answer["detail"][0]["type"] == "database_unavailable"
    assert answer["message"] == "database: the job database is unavailable: database is locked"


def _imported(*argv: str) -> set[str]:
    """The modules a fresh `tally` imports to run `argv`."""
    script = textwrap.dedent(f"""
        import sys
        from app.cli import main
        try:
            main({list(argv)!r})
        except SystemExit:
            pass
        print(" ".join(sorted(sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split())


def test_a_command_imports_what_it_uses():
    routes = set(router.MODULES)
    listing = _imported("calc", "--help")
    assert not listing & routes and "fastapi" not in listing and "pydantic" not in listing
    options = _imported("calc", "flops", "matmul", "--help")
    assert "app.api.services.flops" in options and not options & routes and "fastapi" not in options
    answer = _imported("calc", "flops", "matmul", "--m", "2", "--k", "3", "--n", "4")
    assert answer & routes == {"app.api.routes.flops"}
    assert not {"sqlalchemy", "httpx", "app.jobs.store", "app.probes.registry"} & answer


@pytest.mark.parametrize("argv", [["flops", "matmul", "--m", "2", "--k", "3", "--n", "4"],
                                  ["flops", "matmul", "--help"], ["flops", "matmul", "--m", "0"]])
def test_a_command_gives_the_collector_back(capsys, argv):
    """A command holds the garbage collector off while it imports (app/cli/calc.py run); a caller
    that goes on, as these tests do, gets it back running, with nothing left frozen."""
    run_main(capsys, "calc", *argv)
    assert gc.isenabled() and gc.get_freeze_count() == 0
