"""app/inputs/docstrings.py reads field docstrings from a per-file cache; pydantic's own reading
(inspect's source of the class) is the oracle, for every class of Tally's that pydantic reads
docstrings of, and for the OpenAPI document's descriptions."""

import dataclasses
import importlib
import pkgutil

import pytest
from pydantic import BaseModel
from pydantic._internal import _docs_extraction, _fields

from app.inputs import docstrings

PACKAGES = ("app.accounting", "app.inputs", "app.api", "app.probes", "app.measured")


def _documented() -> list[type]:
    """Every class under PACKAGES that asks pydantic for its attribute docstrings."""
    found: dict[str, type] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if not isinstance(value, type) or not value.__module__.startswith("app."):
                    continue
                if issubclass(value, BaseModel):
                    asks = value.model_config.get("use_attribute_docstrings")
                else:
                    asks = dataclasses.is_dataclass(value) and (
                        getattr(value, "__pydantic_config__", None) or {}).get("use_attribute_docstrings")
                if asks:
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


DOCUMENTED = _documented()


def test_the_cache_is_what_pydantic_calls():
    assert docstrings.install()
    assert _fields.extract_docstrings_from_cls.original is _docs_extraction.extract_docstrings_from_cls


def test_there_are_many_classes_to_check():
    assert len(DOCUMENTED) > 100
    assert sum(bool(_docs_extraction.extract_docstrings_from_cls(c, use_inspect=True)) for c in DOCUMENTED) > 50


@pytest.mark.parametrize("cls", DOCUMENTED, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_each_class_reads_as_pydantic_reads_it(cls):
    ours = _fields.extract_docstrings_from_cls(cls)
    assert ours == _docs_extraction.extract_docstrings_from_cls(cls, use_inspect=True)


def test_a_class_made_by_create_model_or_not_ours_is_placed_with_care():
    from pydantic import create_model

    made = create_model("Made", x=(int, 1), __module__="app.inputs.fields")
    assert docstrings.statement(made) is None  # no class statement: nothing to read
    assert _fields.extract_docstrings_from_cls(made) == {}
    assert docstrings.statement(BaseModel) is docstrings.UNKNOWN  # not Tally's: pydantic's own search


def test_classes_are_found_by_qualified_name_and_a_name_bound_twice_is_left_alone(tmp_path):
    source = tmp_path / "module.py"
    source.write_text(
        "class A:\n    class Inner:\n        x: int\n\n"
        "def f():\n    class Local:\n        y: int\n\n"
        "if True:\n    class B:\n        z: int\nelse:\n    class B:\n        z: str\n")
    classes = docstrings._classes(str(source))
    assert set(classes) == {"A", "A.Inner", "f.<locals>.Local", "B"}
    assert classes["A.Inner"].name == "Inner" and classes["B"] is None


def test_the_api_documents_fields_with_their_docstrings(api):
    document = api.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    described = sum("description" in prop for schema in schemas.values()
                    for prop in schema.get("properties", {}).values())
    assert described > 500
