"""The README stays true: every curl example works, every setting is listed."""

import json
import re
import shlex
from pathlib import Path

from app.config import Settings
from app.jobs.dispatcher import Dispatcher
from app.main import create_app
from tests.conftest import Api

README = (Path(__file__).parent.parent / "README.md").read_text()


def curl_examples() -> list[str]:
    return [line for line in README.splitlines() if line.startswith("curl ")]


def test_every_endpoint_has_an_example():
    examples = [re.search(r"localhost:8000([^\s'?]+)", line).group(1) for line in curl_examples()]
    for template in create_app().openapi()["paths"]:
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        assert any(re.match(pattern, path) for path in examples), f"no README example for {template}"


def test_every_curl_example_works_in_order(tmp_path):
    """Replayed top to bottom on a fresh database, as a reader would type them. Jobs run
    (on the CPU, with real children) only where an example reads a result."""
    api = Api(create_app(Settings(database_path=tmp_path / "readme.db")))
    dispatcher = Dispatcher(api.app.state.store, "readme")
    api.app.state.store.seen(worker_id="readme")  # as a running dispatcher does, for /readyz
    try:
        for line in curl_examples():
            args = shlex.split(line)
            url = next(a for a in args if a.startswith(("localhost:8000", "'localhost:8000")))
            path = url.removeprefix("localhost:8000")
            if "/events" in path or "/result" in path:
                while dispatcher.run_once():
                    pass
            if "-d" in args:
                response = api.post(path, json.loads(args[args.index("-d") + 1]))
            elif "-X" in args:
                response = api.request(args[args.index("-X") + 1], path)
            else:
                response = api.get(path)
            expected = 202 if path == "/api/v1/jobs" and "-d" in args else 200
            assert response.status_code == expected, (line, response.text)
            if response.headers["content-type"].startswith("application/json"):
                response.json()
    finally:
        api.close()


def test_every_setting_is_documented_with_its_default():
    for name, field in Settings.model_fields.items():
        row = re.search(rf"\| `TALLY_{name.upper()}` \| `([^`]*)` \|", README)
        assert row, f"TALLY_{name.upper()} missing from the README"
        assert row.group(1) == str(field.default), name


def test_readme_states_the_course_figures(api):
    """The figures the README quotes are the ones the API gives."""
    days = api.ok("/api/v1/time/training", {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm",
                                            "dtype": "bf16", "num_gpus": 1024, "mfu": 0.5})["days"]
    assert f"{days:.1f} days" in README
    assert "2,415,919,104 B = 2304 MiB" in README


def test_readme_calc_examples_run(capsys):
    """Every `tally calc` line of the README runs and prints the API's JSON."""
    from app.cli import main

    lines = [line for line in README.splitlines() if line.startswith("tally calc ")]
    assert len(lines) >= 5
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, line
        assert isinstance(json.loads(capsys.readouterr().out), (dict, list)), line
