"""Every example the OpenAPI document offers (what Swagger's "Try it out" pre-fills) is a real
question the API answers: each is replayed against the app and must get a 2xx."""

import json
import re

import pytest

from app.device import fleet_device
from app.main import create_app
from tests.support import ROOT

DOC = create_app().openapi()
DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


def _operations():
    for path, item in DOC["paths"].items():
        for method, op in item.items():
            yield path, method, op


def _body_examples() -> list[tuple[str, str, str, object]]:
    found = []
    for path, method, op in _operations():
        content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
        for name, example in content.get("examples", {}).items():
            found.append((method, path, name, example["value"]))
    return found


def _parameter_examples() -> list[tuple[str, str, str]]:
    """(method, path with the example filled in, example name) for each path parameter example."""
    found = []
    for path, method, op in _operations():
        for param in op.get("parameters", []):
            for name, example in param.get("examples", {}).items():
                found.append((method, path.replace("{" + param["name"] + "}", str(example["value"])), name))
    return found


BODY_EXAMPLES = _body_examples()


def test_every_route_with_a_body_offers_an_example():
    with_body = {(m, p) for p, m, op in _operations() if "requestBody" in op}
    assert with_body, "no routes with bodies found"
    assert {(m, p) for m, p, _, _ in BODY_EXAMPLES} == with_body
    assert {p for p, m, _ in _operations() if m == "post"} - {p for _, p in with_body} == {
        "/api/v1/jobs/{job_id}/cancel", "/api/v1/campaigns/{campaign_id}/cancel",
        "/api/v1/calibration/profiles"}  # no body: nothing to pre-fill (a profile is built from the runs)


@pytest.mark.parametrize("method,path,name,body", BODY_EXAMPLES,
                         ids=[f"{p} {n}" for _, p, n, _ in BODY_EXAMPLES])
def test_every_body_example_is_answered(make_api, method, path, name, body):
    api = make_api()  # its own job database: the jobs examples queue real jobs
    # The fleet's examples need a fleet: this box's CPU, as its worker registers it, and an H200.
    api.app.state.store.register(fleet_device("box", None))
    api.app.state.store.register({"device": "GPU-47136eb1-1fb2-68e1-d23b-963ae407b727", "host": "gpu-box",
                                  "kind": "cuda", "name": "NVIDIA H200", "catalogue_id": "h200",
                                  "memory_bytes": 150754820096})
    response = api.request(method.upper(), path, json=body)
    assert 200 <= response.status_code < 300, response.text
    # An example asks a sensible question: none answers with a warning that it is impossible
    # (issue 28, point 4: /time/mfu's example once answered MFU 41).
    assert "impossible" not in response.text.lower(), response.text


@pytest.mark.parametrize("method,path,name", _parameter_examples())
def test_every_parameter_example_is_answered(api, method, path, name):
    response = api.request(method.upper(), path)
    assert 200 <= response.status_code < 300, response.text


def test_the_docs_curl_bodies_are_the_examples():
    """The README, the docs site and /docs ask the same questions."""
    offered = {(p, json.dumps(b, sort_keys=True)) for _, p, _, b in BODY_EXAMPLES}
    curls = re.findall(r"^curl -s localhost:8000(\S+) .* -d '(\{.*\})'$", DOCS, flags=re.M)
    assert len(curls) >= 10
    for path, body in curls:
        assert (path, json.dumps(json.loads(body), sort_keys=True)) in offered, path


def test_the_memory_example_is_a_run_that_fits(api):
    """The pre-filled memory question is a real one: LLaMA-2-7B trained on an 80 GB H100 fits.
    (The generated body once overrode the GPU's memory to 1 byte: fits false, headroom -2e9.)"""
    method, path, _, body = next(e for e in BODY_EXAMPLES if e[1] == "/api/v1/memory/training")
    assert "gpu_overrides" not in body
    answer = api.ok(path, body)
    assert answer["fits"] is True
    assert answer["headroom"] > 0
