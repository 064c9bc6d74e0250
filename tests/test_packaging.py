"""What the package imports is what it declares, and CI runs the README's test command."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Imports of the optional features, each inside the function that needs it, and the extra that brings it.
OPTIONAL = {"starlette": "serve", "uvicorn": "serve", "ray": "ray", "pyarrow": "ray",
            "transformers": "test"}
DISTRIBUTIONS = {"huggingface_hub": "huggingface-hub"}  # import name -> distribution name, where they differ


def _third_party_imports() -> list[tuple[str, str, bool]]:
    """(import root, file, at module level) for every absolute import of another distribution."""
    found = []
    for path in sorted((ROOT / "minialign").glob("*.py")) + sorted((ROOT / "convert").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                if root not in sys.stdlib_module_names and root != "minialign":
                    found.append((root, path.name, node.col_offset == 0))
    return found


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_every_import_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extras = {name: project["optional-dependencies"][name] for name in project["optional-dependencies"]}
    for root, file, module_level in _third_party_imports():
        if root in OPTIONAL:
            assert not module_level, f"{file} imports {root} at module level: the core import would need it"
            extra = extras[OPTIONAL[root]]
            assert root in _requirement_names(extra) or (OPTIONAL[root] == "ray" and "ray[data]>=2.9" in extra), (
                f"{file} imports {root}, which the {OPTIONAL[root]!r} extra does not declare")
        else:
            assert DISTRIBUTIONS.get(root, root).lower() in core, (
                f"{file} imports {root}, which is not among the runtime dependencies {sorted(core)}")


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    cited = re.search(r'# README\.md, "([^"]+)"', ci)
    assert cited, ".ci/run names the README section its command comes from"
    assert re.search(rf"^#+ {re.escape(cited.group(1))}$", readme, flags=re.M), (
        f".ci/run cites the README heading {cited.group(1)!r}, which README.md does not have")
    command = next(line for line in ci.splitlines() if line.startswith("pip install torch=="))
    assert f"\n{command}\n" in readme, "the command .ci/run runs is the one README.md shows"


def test_readme_lists_the_registered_families_once():
    """README.md's family table is the registry (nn/config.py families()), and its first paragraph counts them
    instead of listing them a second time."""
    from minialign.nn.config import families

    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Encoder families", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([\w-]+)` \|", table, flags=re.M)
    assert sorted(listed) == sorted(families()), "README.md's family table differs from the registered families"
    intro = readme.split("\n## ", 1)[0]
    assert f"the {len(families())} families of the table" in intro
    assert "\n".join(intro.splitlines()[2:5]) not in readme.split("\n## ", 1)[1], "the first paragraph is repeated"
