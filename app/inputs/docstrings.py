"""Attribute docstrings, each source file read and parsed once.

Tally's models and result dataclasses set `use_attribute_docstrings` (fields.STRICT,
accounting/records.RECORD): pydantic turns the string under each field into its OpenAPI
description. Before Python 3.13 it finds a class's source the slow way: a model by walking
the call frames and asking `inspect.getmodule` of each (a scan of sys.modules per frame), a
dataclass by `inspect.getsourcelines`, which parses the class's whole module again for every
class. That was about 10 ms a class, a fifth of a `tally calc` call's CPU and more of a
server's start (bench/cli_speed.py).

`install()` puts `extract` in its place for Tally's own classes: each module's source is
parsed once, and a class is found in that tree by its qualified name. The attributes are then
read by pydantic's own visitor, so the descriptions are pydantic's, byte for byte
(tests/api/test_docstrings.py holds them against pydantic's extraction for every class). A
class with no statement in its module's file (made by create_model) has no docstrings to read;
one it cannot place without doubt (defined twice under one name, or not in a file) is left to
pydantic, as is every class outside `app`.
"""

import ast
import functools
import sys
from collections.abc import Callable
from typing import Any

OURS = "app."


@functools.cache
def _classes(filename: str) -> dict[str, ast.ClassDef | None]:
    """Every class statement in the file, by qualified name; None for a name bound twice."""
    with open(filename, encoding="utf-8") as source:
        tree = ast.parse(source.read(), filename)
    found: dict[str, ast.ClassDef | None] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = prefix + node.name
                found[name] = None if name in found else node
                walk(node.body, name + ".")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.If | ast.Try | ast.With):  # a class under a guard is still the module's
                for part in ("body", "orelse", "finalbody", "handlers"):
                    for inner in getattr(node, part, []):
                        walk(inner.body if isinstance(inner, ast.ExceptHandler) else [inner], prefix)

    walk(tree.body, "")
    return found


UNKNOWN = object()
"""statement()'s answer where only pydantic's own search can tell."""


def statement(cls: type) -> ast.ClassDef | None | object:
    """The class statement that defined `cls`; None where its module's file holds none under its
    name (a model made by create_model: no attribute docstrings to read); UNKNOWN otherwise."""
    if not cls.__module__.startswith(OURS):
        return UNKNOWN
    filename = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if not filename or not filename.endswith(".py"):
        return UNKNOWN
    try:
        classes = _classes(filename)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return UNKNOWN
    if cls.__qualname__ not in classes:
        return None
    return classes[cls.__qualname__] or UNKNOWN  # bound twice: which one made `cls`?


def _extractor(original: Callable[..., dict[str, str]], visitor: type) -> Callable[..., dict[str, str]]:
    def extract(cls: type[Any], use_inspect: bool = False) -> dict[str, str]:
        node = statement(cls)
        if node is UNKNOWN:
            return original(cls, use_inspect=use_inspect)
        if node is None:
            return {}
        reading = visitor()
        reading.generic_visit(node)  # as pydantic reads the class statement it finds itself
        return reading.attrs

    extract.original = original  # type: ignore[attr-defined]
    return extract


def install() -> bool:
    """Read Tally's docstrings through the per-file cache; True when in place. Where pydantic's
    private layout differs from the one this knows, nothing is changed (its own reading stays)."""
    try:
        from pydantic._internal import _docs_extraction, _fields, _generate_schema
    except ImportError:
        return False
    original = getattr(_docs_extraction, "extract_docstrings_from_cls", None)
    visitor = getattr(_docs_extraction, "DocstringVisitor", None)
    users = [m for m in (_fields, _generate_schema) if hasattr(m, "extract_docstrings_from_cls")]
    if original is None or visitor is None or not users:
        return False
    if hasattr(_fields.extract_docstrings_from_cls, "original"):
        return True
    extract = _extractor(original, visitor)
    for module in users:
        module.extract_docstrings_from_cls = extract
    return True
