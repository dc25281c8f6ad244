"""The structure the code promises, read from its imports: arrows point down only.

Each part of app/ (a package, or a module at the top) sits on a layer, and imports only
the parts on lower layers; two parts on one layer never import each other. Imports inside
functions count too: a lazy import is still an arrow. The torch boundary is a folder.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

APP = ROOT / "app"

# Lowest first. A part may import the parts of earlier layers only.
LAYERS = (
    {"numbers"},                         # the one number formatter: standard library only
    {"accounting"},                      # the engine: pure functions over numbers and dataclasses
    {"__init__", "paths", "config", "logs"},
    {"inputs", "device"},                # the request vocabulary (pydantic only); this box (NVML, /proc)
    {"probes"},                          # torch-free: each probe's params, result, prediction and faces
    {"bench", "jobs"},                   # torch-only probes in children; the queue and its dispatchers
    {"measured"},                        # what stored results say: calibration, power, burn-in statistics
    {"deps"},
    {"api"},
    {"ops", "web"},
    {"main"},
    {"cli"},
    {"__main__"},                        # python -m app: `tally serve`
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
# Third-party packages a part must never import.
FORBIDDEN = {
    "accounting": {"torch", "fastapi", "starlette", "pydantic", "transformers", "gguf", "bitsandbytes",
                   "peft"},
    "inputs": {"torch", "fastapi", "starlette", "transformers", "gguf", "bitsandbytes"},
    "probes": {"torch", "fastapi", "starlette", "transformers", "gguf", "bitsandbytes", "sqlalchemy"},
    "device": {"torch", "fastapi", "starlette"},
    "jobs": {"torch", "fastapi", "transformers"},
    "measured": {"torch", "fastapi", "starlette", "sqlalchemy"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(APP)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path, text: str | None = None) -> set[str]:
    """Every module `path` (or `text`, as if at `path`) imports, at the top or inside a function,
    relative ones resolved."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text, str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from app import device`
    return found


def _app_part(module: str) -> str | None:
    """The part of app/ a module name lands in; None outside app (or a name that is no module)."""
    names = module.split(".")
    if names[0] != "app":
        return None
    if len(names) == 1:
        return "__init__"
    if (APP / names[1]).is_dir() or (APP / f"{names[1]}.py").is_file():
        return names[1]
    return None


def edges(extra: dict[Path, str] | None = None) -> dict[tuple[str, str], list[str]]:
    """(importer part, imported part) -> the files that make that arrow; `extra`: more files
    under app/, by path, with their text."""
    found: dict[tuple[str, str], list[str]] = {}
    files = [(path, None) for path in APP.rglob("*.py")] + list((extra or {}).items())
    for path, text in files:
        source = _part(path)
        for module in imports(path, text):
            target = _app_part(module)
            if target is not None and target != source:
                found.setdefault((source, target), []).append(str(path.relative_to(ROOT)))
    return found


def test_every_part_of_app_has_a_layer():
    parts = {_part(p) for p in APP.rglob("*.py")}
    assert parts <= set(RANK), sorted(parts - set(RANK))


def test_arrows_point_down_only():
    wrong = {f"{a} -> {b}": sorted(set(files)) for (a, b), files in edges().items() if RANK[a] <= RANK[b]}
    assert not wrong, wrong


def test_no_two_parts_import_each_other():
    arrows = set(edges())
    assert not {(a, b) for a, b in arrows if (b, a) in arrows}


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_parts_import_no_forbidden_package(part):
    for path in (APP / part).rglob("*.py") if (APP / part).is_dir() else [APP / f"{part}.py"]:
        roots = {module.split(".")[0] for module in imports(path)}
        assert not roots & FORBIDDEN[part], (path, roots & FORBIDDEN[part])


def test_torch_is_imported_in_app_bench_only():
    for path in APP.rglob("*.py"):
        if "torch" in {module.split(".")[0] for module in imports(path)}:
            assert _part(path) == "bench", path


def test_the_checker_sees_a_wrong_arrow():
    """The reading itself: an import up from the engine, relative or lazy, would be caught."""
    probe = {APP / "accounting" / "probe.py":
             "from ..api import errors\n\ndef f():\n    from app import device\n",
             APP / "bench" / "probe.py": "from app.jobs.store import Store\n"}
    arrows = edges(probe)
    wrong = {(a, b) for (a, b) in arrows if RANK[a] <= RANK[b]}
    assert {("accounting", "api"), ("accounting", "device"), ("bench", "jobs")} <= wrong


def test_importing_the_app_creates_no_database(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TALLY_DATABASE_PATH"} | {"PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", "import app.main, app.cli.calc, app.web.pages"], cwd=tmp_path,
                   env=env, check=True)
    assert list(tmp_path.iterdir()) == []
