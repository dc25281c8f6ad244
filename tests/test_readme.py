"""The README stays true: every curl example works, every setting is listed."""

import json
import re
import shlex
from pathlib import Path

from app.config import Settings
from app.main import create_app

README = (Path(__file__).parent.parent / "README.md").read_text()


def curl_examples() -> list[str]:
    return [line for line in README.splitlines() if line.startswith("curl ")]


def test_every_endpoint_has_an_example():
    examples = [re.search(r"localhost:8000(\S+)", line).group(1) for line in curl_examples()]
    for template in create_app().openapi()["paths"]:
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        assert any(re.match(pattern, path) for path in examples), f"no README example for {template}"


def test_every_curl_example_answers_200(api):
    for line in curl_examples():
        args = shlex.split(line)
        url = next(a for a in args if a.startswith("localhost:8000"))
        path = url.removeprefix("localhost:8000")
        if "-d" in args:
            body = json.loads(args[args.index("-d") + 1])
            response = api.post(path, body)
        else:
            response = api.get(path)
        assert response.status_code == 200, (line, response.text)
        response.json()


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
