"""The docs site (docs/, mkdocs.yml): every ```python block runs, page by page in order, in one namespace per page
(a block that stops raising is as much a failure as one that raises: pages assert what they show), and the site
builds with `mkdocs build --strict` (a broken link, a missing page or a docstring reference that does not resolve
fails it)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[str]:
    return BLOCK.findall((DOCS / page).read_text())


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [p for p in PAGES if p not in nav] == []


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_the_code_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a page writing files writes them here
    namespace = {"__name__": f"docs.{page}"}
    for number, code in enumerate(blocks(page), 1):
        try:
            exec(compile(code, f"{page} block {number}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"docs/{page}, code block {number} failed: {error!r}\n{code}") from error


def test_the_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "internals" / "heads" / "index.html").exists()
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "activation_patching" in reference and "prune_heads" in reference  # the docstrings were read
