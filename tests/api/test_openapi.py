"""The OpenAPI document: flat routes equal include_router's, and bounds are stated."""

import json

from fastapi import FastAPI

from app.api.router import include_api, include_api_nested
from app.main import create_app


def _document(include) -> dict:
    app = FastAPI(title="t", version="0")
    include(app)
    return app.openapi()


def test_flat_routes_give_the_same_document_as_include_router():
    assert json.dumps(_document(include_api), sort_keys=True) == json.dumps(
        _document(include_api_nested), sort_keys=True)


def test_every_integer_and_number_field_is_bounded():
    """Fuzzers and clients see real bounds: no raw pydantic 'ge'/'le' keys, and every
    request number has a minimum and a maximum."""
    doc = create_app().openapi()
    text = json.dumps(doc)
    assert '"ge":' not in text and '"le":' not in text
    unbounded = []

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("type") in ("integer", "number") and "const" not in node and not (
                    ("minimum" in node or "exclusiveMinimum" in node)
                    and ("maximum" in node or "exclusiveMaximum" in node)):
                unbounded.append(path)
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")

    for name, schema in doc["components"]["schemas"].items():
        if name.endswith(("Request", "In")) or name in ("TransformerConfig", "GpuOverrides", "PeakOverrides"):
            walk(schema, name)
    assert unbounded == []


def test_every_request_model_forbids_unknown_fields():
    doc = create_app().openapi()
    for name, schema in doc["components"]["schemas"].items():
        if name.endswith("Request"):
            assert schema.get("additionalProperties") is False, name


def test_every_route_tag_is_declared():
    doc = create_app().openapi()
    declared = [t["name"] for t in doc["tags"]]
    used = {tag for item in doc["paths"].values() for op in item.values() for tag in op["tags"]}
    assert used == set(declared)


def test_authentication_is_declared_only_when_a_token_is_set():
    from pydantic import SecretStr

    from app.config import get_settings

    def secured(doc: dict) -> set[str]:
        return {f"{method} {path}" for path, item in doc["paths"].items()
                for method, op in item.items() if "security" in op or "401" in op.get("responses", {})}

    open_doc = create_app(get_settings().model_copy(update={"api_token": None})).openapi()
    assert secured(open_doc) == set() and "securitySchemes" not in open_doc["components"]
    token = get_settings().model_copy(update={"api_token": SecretStr("t")})
    assert secured(create_app(token).openapi()) == {"post /api/v1/jobs", "post /api/v1/jobs/{job_id}/cancel",
                                                    "post /api/v1/campaigns",
                                                    "post /api/v1/campaigns/{campaign_id}/cancel",
                                                    "post /api/v1/calibration/campaigns",
                                                    "post /api/v1/calibration/profiles",
                                                    "post /api/v1/calibration/import",
                                                    "post /api/v1/import/job",
                                                    "post /api/v1/import/campaign"}
