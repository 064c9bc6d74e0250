"""Package contract: the runtime needs none of transformers; convert knows nothing of minialign."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_convert_imports_nothing_from_minialign():
    for path in (ROOT / "convert").glob("*.py"):
        assert "minialign" not in _imports(path), path


def test_no_transformers_in_the_runtime():
    """Only the parity tool (test extra) imports transformers, inside the functions that need it."""
    heavy = {"transformers", "pytorch_lightning", "lightning", "nltk", "spacy"}
    for path in [*(ROOT / "minialign").glob("*.py"), *(ROOT / "convert").glob("*.py")]:
        assert not _imports(path, top_level_only=True) & heavy, path
        if path.name != "parity.py":
            assert not _imports(path) & heavy, path
    code = "import sys, minialign, minialign.cli, minialign.parity; " \
           "bad = [m for m in ('transformers', 'pytorch_lightning', 'nltk', 'spacy') if m in sys.modules]; " \
           "assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_convert_is_installed_inside_minialign(tmp_path):
    """A `convert.py` in the working directory (a common name) cannot shadow the converter."""
    (tmp_path / "convert.py").write_text("raise SystemExit('the wrong convert was imported')\n")
    code = ("import minialign, minialign.convert as c; "
            "assert c.__name__ == 'minialign.convert' and c.CheckpointError is minialign.CheckpointError; "
            "minialign.Encoder.from_pretrained")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_no_benchmark_harness_in_the_package():
    """The benchmark and the reference pipeline are tools in scripts/, not installed code."""
    assert not (ROOT / "minialign" / "bench.py").exists()
    assert (ROOT / "scripts" / "bench.py").is_file() and (ROOT / "scripts" / "original_alignscore.py").is_file()
    from minialign.cli import main

    try:
        main(["bench"])
    except SystemExit as e:  # argparse: not a command of the installed CLI
        assert e.code == 2
    else:
        raise AssertionError("`minialign bench` still exists")
