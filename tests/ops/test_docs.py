"""The docs a newcomer reads: a README short enough to read at once, whose links and pictures
exist; a site that builds with `mkdocs build --strict` (a broken link or anchor fails it); an
architecture page whose layers are tests/test_layout.py's and whose lists of files to touch
name files that exist. (The curl and `tally calc` examples run in test_docs_examples.py.)"""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.main import create_app

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "mkdocs.yml").exists())
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
EXTENSIONS = ("Add a calculator", "Add a probe", "Add a model family", "Add a block kind", "Add a serving engine")


def test_the_readme_is_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def test_the_readme_links_and_pictures_exist():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert sum(t.startswith("docs/screenshots/") for t in local) >= 5  # the tour has pictures
    assert sum(t.startswith("docs/") and t.endswith(".md") for t in local) >= 10  # and says where next
    for target in local:
        assert (ROOT / target).is_file(), target


def test_the_readme_keeps_the_two_set_up_commands():
    """`make run` and `make test` are what the README says: targets of the Makefile."""
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test"):
        assert re.search(rf"^make {target} +# ", README, flags=re.M), target
        assert re.search(rf"^{target}: ", makefile, flags=re.M), target


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], capture_output=True, text=True, env=env, timeout=120)


def test_the_site_builds_strictly(tmp_path):
    built = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()
    assert (tmp_path / "site" / "measurements" / "index.html").is_file()  # docs/measurements/README.md
    assert not (ROOT / "site").exists()  # never into the checkout


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """The strict build is a real check: a copy of the docs with one bad link, then one bad anchor,
    does not build."""
    for bad in ("[a page that is not there](nowhere.md)", "[an anchor that is not there](setup.md#nowhere)"):
        copy = tmp_path / f"copy{len(bad)}"
        shutil.copytree(ROOT / "docs", copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        with (copy / "docs" / "index.md").open("a") as index:
            index.write(f"\n{bad}\n")
        built = _mkdocs(copy / "mkdocs.yml", copy / "site")
        assert built.returncode != 0 and "nowhere" in built.stderr, bad


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        assert f" {page.relative_to(ROOT / 'docs').as_posix()}\n" in nav, page


def test_the_api_index_names_every_route():
    index = (ROOT / "docs" / "api" / "index.md").read_text()
    for path in create_app().openapi()["paths"]:
        if path.startswith("/api/v1/"):
            assert f"`{path.removeprefix('/api/v1')}`" in index, path


def _layers() -> list[set[str]]:
    """tests/test_layout.py's LAYERS, read from its source (wherever the test folder puts it)."""
    source = next((ROOT / "tests").glob("**/test_layout.py"))
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in node.targets):
            return [set(layer) for layer in ast.literal_eval(node.value)]
    raise AssertionError(f"no LAYERS in {source}")


def test_the_architecture_page_shows_the_layers_of_the_layout_test():
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", ARCHITECTURE, flags=re.M)
    documented = [set(re.findall(r"`([^`]+)`", parts)) for _, parts in rows]
    assert [int(n) for n, _ in rows] == list(range(len(rows)))
    assert documented == _layers()


def _extension_lists() -> dict[str, list[str]]:
    """Each "## Add a ..." section's bulleted paths: `- `path`: what changes there`."""
    sections = re.split(r"^## ", ARCHITECTURE, flags=re.M)
    return {s.splitlines()[0]: re.findall(r"^- `([^`]+)`", s, flags=re.M) for s in sections
            if s.startswith("Add a ")}


def test_the_architecture_page_lists_the_files_of_each_extension():
    lists = _extension_lists()
    assert sorted(lists) == sorted(EXTENSIONS)
    for name, paths in lists.items():
        assert len(paths) >= 2, name
        assert all("/" in p or "." in p for p in paths), (name, paths)


@pytest.mark.parametrize("path", [p for paths in _extension_lists().values() for p in paths])
def test_each_listed_file_exists(path):
    """A concrete path is a file; a pattern (`<name>` for any name, `**` for any folders) matches
    at least one, so the list shows a real example of each file to touch."""
    if "<" not in path and "*" not in path:
        assert (ROOT / path).is_file(), path
    else:
        pattern = re.sub(r"<[^>]+>", "*", path)
        assert next(ROOT.glob(pattern), None) is not None, f"nothing matches {path}"
