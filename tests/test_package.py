"""Package contract: folders by layer, each importing only what its rule allows; no import cycles;
no sibling modules named apart by a suffix; the runtime needs none of transformers; convert knows
nothing of minialign; the public names are the package's attributes, never replaced by a module."""

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minialign"

# folder -> the minialign folders its modules may import (besides their own). The same rules are
# stated in each folder's __init__.py docstring and in minialign/__init__.py.
MAY_IMPORT = {
    "nn": set(),  # torch only: a family's format reaches nn/config.py through its config class
    "sources": {"convert"},
    "text": {"sources"},
    "loading": {"nn", "sources", "text", "convert"},
    "models": {"nn", "loading", "convert"},
    "runtime": {"text", "nn"},
    "products": {"nn", "sources", "loading", "models", "text", "runtime", "convert"},
    "apps": {"nn", "sources", "loading", "models", "text", "runtime", "products", "convert"},
}


def module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "convert"):
        parts = ("minialign", "convert", *path.relative_to(ROOT / "convert").with_suffix("").parts)
    else:
        parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def library_files() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "convert").rglob("*.py")])


def imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Every module `path` imports, anywhere in it (lazy imports inside functions too), as absolute names."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            if base != "minialign":  # the package root is imported by every module: not an edge
                names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return names


def internal_edges() -> dict[str, set[str]]:
    files = {module_name(p): p for p in library_files()}
    return {name: {m for m in imports(path) if m in files and m != name} for name, path in files.items()}


def folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


def test_every_folder_has_a_rule():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(MAY_IMPORT)


def test_each_folder_imports_only_what_its_rule_allows():
    wrong = []
    for module, targets in internal_edges().items():
        home = folder(module)
        if home is None:
            continue  # the package root (the public names)
        for target in targets:
            there = folder(target) if not target.startswith("minialign.convert") else "convert"
            if there is None:
                wrong.append(f"{module} imports {target} (the package root)")
            elif there != home and there not in MAY_IMPORT[home]:
                wrong.append(f"{module} imports {target}: {home}/ may import {sorted(MAY_IMPORT[home]) or 'nothing'}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    """No module reaches itself through its imports (lazy imports inside functions count)."""
    edges = internal_edges()
    cycles = []
    for start in edges:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not cycles, "\n".join(sorted(set(cycles))[:10])


def test_the_import_reader_sees_relative_and_lazy_imports():
    """What the rules above rest on: imports inside functions and relative ones are resolved."""
    assert "minialign.loading.weights" in imports(PACKAGE / "loading" / "pretrained.py")  # lazy, in from_pretrained
    assert "minialign.text.tokenizer" in imports(PACKAGE / "runtime" / "engine.py")
    assert "minialign.convert.errors" in imports(ROOT / "convert" / "__init__.py") or \
        "minialign.convert.files" in imports(ROOT / "convert" / "__init__.py")  # relative, inside convert


def test_no_sibling_modules_named_apart_by_a_suffix():
    """batching / batcher / batchfile or scores / scorer held different things under near-equal names."""
    clashes = []
    for directory in [PACKAGE, *[p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"]]:
        names = sorted(p.stem for p in directory.glob("*.py") if p.stem != "__init__")
        for a, b in itertools.combinations(names, 2):
            common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if common >= 4 and max(len(a), len(b)) - common <= 5:
                clashes.append(f"{directory.relative_to(ROOT)}: {a} / {b}")
    assert not clashes, clashes


def test_convert_imports_nothing_from_minialign():
    for path in (ROOT / "convert").glob("*.py"):
        assert not any(m.startswith("minialign") and not m.startswith("minialign.convert") for m in imports(path)), path


def test_no_transformers_in_the_runtime():
    """Only the parity tool (test extra) imports transformers, inside the functions that need it."""
    heavy = {"transformers", "pytorch_lightning", "lightning", "nltk", "spacy"}
    top = lambda names: {n.split(".")[0] for n in names}  # noqa: E731
    for path in library_files():
        assert not top(imports(path, top_level_only=True)) & heavy, path
        if path.name != "parity.py":
            assert not top(imports(path)) & heavy, path
    code = "import sys, minialign, minialign.apps.cli, minialign.apps.parity; " \
           "bad = [m for m in ('transformers', 'pytorch_lightning', 'nltk', 'spacy') if m in sys.modules]; " \
           "assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_serve_extra_stays_in_the_service():
    """pydantic and starlette (the serve extra) are imported at the top of serve/'s modules only: `import minialign`
    and the CLI never import them (`minialign serve` names the extra where they are missing)."""
    extra = {"pydantic", "pydantic_core", "starlette", "uvicorn"}
    top = lambda names: {n.split(".")[0] for n in names}  # noqa: E731
    for path in library_files():
        if "serve" not in path.parent.name:
            assert not top(imports(path, top_level_only=True)) & extra, path
    code = "import sys, minialign, minialign.apps.cli, minialign.apps.products; " \
           "bad = [m for m in ('pydantic', 'starlette', 'uvicorn') if m in sys.modules]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_tokenizer_reaches_no_process_machinery():
    """text/ sits below runtime/: nothing the tokenizer imports, directly or through others, is the
    batching engine or the process pool (it used to take `pad` from the engine, which imports workers)."""
    edges, reached, todo = internal_edges(), set(), ["minialign.text.tokenizer"]
    while todo:
        for nxt in edges[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    assert not {m for m in reached if m.startswith(("minialign.runtime", "minialign.products", "minialign.nn"))}


def test_convert_is_installed_inside_minialign(tmp_path):
    """A `convert.py` in the working directory (a common name) cannot shadow the converter."""
    (tmp_path / "convert.py").write_text("raise SystemExit('the wrong convert was imported')\n")
    code = ("import minialign, minialign.convert as c; "
            "assert c.__name__ == 'minialign.convert' and c.CheckpointError is minialign.CheckpointError; "
            "minialign.Encoder.from_pretrained")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_no_benchmark_harness_in_the_package():
    """The benchmark and the reference pipeline are tools in scripts/, not installed code."""
    assert not list(PACKAGE.rglob("bench*.py"))
    assert (ROOT / "scripts" / "original_alignscore.py").is_file()
    from minialign.apps.cli import main

    with pytest.raises(SystemExit) as e:  # argparse: not a command of the installed CLI
        main(["bench"])
    assert e.value.code == 2


def test_old_module_paths_are_gone_and_the_public_names_stay():
    """0.1's flat module paths (minialign.scorer, minialign.cli, ...) were removed in 0.3 (CHANGELOG: the new
    paths); `ma.attention` and `ma.explore` are the public functions, whichever modules are imported."""
    import importlib

    for old in ("scorer", "model", "batching", "tracing", "explore_page"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"minialign.{old}")
    import minialign as ma

    importlib.import_module("minialign.nn.attention")
    importlib.import_module("minialign.apps.explore")
    assert ma.attention is importlib.import_module("minialign.nn.attention").attention
    assert ma.explore is importlib.import_module("minialign.apps.explore").explore
    assert ma.masks is importlib.import_module("minialign.nn.masks")
    with pytest.raises(AttributeError):
        ma.scorer


def test_the_version_is_the_distribution_s():
    import tomllib

    import minialign

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert minialign.__version__ == declared


def test_tests_mirror_the_folders():
    """tests/<folder>/ holds the tests of minialign/<folder>/ (convert/ too); cross-cutting ones stay at the top."""
    library = set(MAY_IMPORT) | {"convert"}
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= library, folders - library
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), "test modules are imported by name: no two may share one"


# What users import first, each alone in a fresh process: the package imports nothing at its own import, so each of
# these must bring what it needs in an order that works by itself (a module of the package left in sys.modules
# half-imported, or a stand-in importing on any read, broke some before).
FIRST_IMPORTS = ["minialign.nn.capture", "minialign.nn.attention", "minialign.nn.config", "minialign.nn.analysis",
                 "minialign.loading", "minialign.models", "minialign.products.embeddings",
                 "minialign.products.alignscore", "minialign.products.sparse", "minialign.text.tokenizer",
                 "minialign.runtime.engine", "minialign.apps.cli", "minialign.apps.serve", "minialign.convert"]


def test_each_module_users_import_first_imports_alone():
    code = ("import subprocess, sys\n"
            "failed = []\n"
            "for name in sys.argv[1:]:\n"
            "    done = subprocess.run([sys.executable, '-W', 'error::DeprecationWarning', '-c', f'import {name}'],\n"
            "                          capture_output=True, text=True)\n"
            "    failed += [f'{name}: {done.stderr.strip().splitlines()[-1]}'] if done.returncode else []\n"
            "assert not failed, failed\n")
    done = subprocess.run([sys.executable, "-c", code, *FIRST_IMPORTS], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_folders_and_families_without_a_public_name_read_first():
    """`ma.nn.capture` read as a folder's attribute imports it; nn.config alone knows every family."""
    code = ("import minialign as ma\n"
            "assert callable(ma.nn.capture.capture) and ma.products.minicheck.MiniCheckScorer\n"
            "import minialign.nn.config as c\n"
            "assert type(c.Config(arch='bert', vocab_size=10, hidden_size=8, num_layers=1, num_heads=2,"
            " intermediate_size=8)).__name__ == 'BertConfig' and 'roberta-base' in c.PRESETS\n"
            "try:\n"
            "    ma.nn.nothing_here\n"
            "except AttributeError:\n"
            "    pass\n"
            "else:\n"
            "    raise AssertionError('a missing name read as an attribute')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
