"""Text people wrote, offline on every machine with Python: the paragraphs of Python's language reference
as shipped (`pydoc_data.topics.topics`) and of the standard library's docstrings.

Passages: paragraphs of at least MIN_WORDS words (the reference's, and a docstring's after its first),
whitespace collapsed, leaving out code and tables (a paragraph starting with '>>>', '|', '+', '-', '*',
'='). Queries: the first paragraph (the summary) of each docstring of QUERY_WORDS words and not code, less
any that is also a passage. Both deduplicated, in a fixed order (modules, then their names, sorted), so a machine
gives the same lists run after run (another Python version ships other docstrings).

The standard library is imported in a child process (`python -I -S`: the standard library only, no site
packages, no setuptools' `distutils`), so the benchmark's own process is not touched by the hundreds of
imports; the child writes JSON to a file (a module may write to its stdout when imported).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

MIN_WORDS = 12
QUERY_WORDS = (4, 30)
NOT_PROSE = (">>>", "|", "+", "-", "*", "=")  # code, tables, lists, rules
# Never imported: the test suites, GUI toolkits and modules that act when imported (`this` prints,
# `antigravity` opens a browser), and private modules (`__main__` would run a package's command line).
SKIP = ("test", "tests", "idlelib", "tkinter", "turtle", "turtledemo", "antigravity", "this")


def paragraphs(text: str) -> list[str]:
    """The text's paragraphs (blank-line separated), whitespace collapsed, empty ones left out."""
    return [p for p in (" ".join(block.split()) for block in re.split(r"\n\s*\n", text)) if p]


def prose(paragraph: str) -> bool:
    """A passage: MIN_WORDS words or more, not code or a table."""
    return len(paragraph.split()) >= MIN_WORDS and not paragraph.startswith(NOT_PROSE)


def _skipped(name: str) -> bool:
    return any(part.startswith("_") or part in SKIP for part in name.split("."))


def _module_names() -> list[str]:
    """Every importable standard-library module and submodule not skipped, sorted (run in the child)."""
    import importlib
    import pkgutil
    import sysconfig

    stdlib = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
    names = set()
    for name in sorted(sys.stdlib_module_names):
        if _skipped(name):
            continue
        try:
            module = importlib.import_module(name)
        except BaseException:  # noqa: BLE001  a platform's module (winreg), a missing C library
            continue
        file = getattr(module, "__file__", None)
        if file is not None and not str(Path(file).resolve()).startswith(stdlib):
            continue  # shadowed by something outside the standard library
        names.add(name)
        if hasattr(module, "__path__"):  # a package: its submodules
            for info in pkgutil.walk_packages(module.__path__, prefix=name + ".", onerror=lambda _: None):
                if not _skipped(info.name):
                    names.add(info.name)
    return sorted(names)


def _docstrings(module) -> list[str]:
    """The module's docstring, then those of its public classes and functions defined there (sorted by
    name), each class followed by its methods' and properties' (sorted)."""
    import inspect

    docs = [inspect.getdoc(module)]
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        docs.append(inspect.getdoc(obj))
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_"):
                    continue
                member = getattr(member, "__func__", member)  # staticmethod, classmethod
                if inspect.isroutine(member) or isinstance(member, property):
                    docs.append(inspect.getdoc(member))
    return [doc for doc in docs if doc]


def collect() -> dict:
    """{"reference": the language reference's paragraphs, "docstrings": every docstring's paragraphs}
    (run in the child: imports the standard library)."""
    import importlib
    import warnings

    from pydoc_data.topics import topics

    reference = [p for _, text in sorted(topics.items()) for p in paragraphs(text)]
    docstrings = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in _module_names():
            try:
                module = importlib.import_module(name)
            except BaseException:  # noqa: BLE001
                continue
            docstrings += [paragraphs(doc) for doc in _docstrings(module)]
    return {"python": sys.version.split()[0], "reference": reference, "docstrings": docstrings}


@cache
def _raw() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "text.json"
        subprocess.run([sys.executable, "-I", "-S", __file__, str(out)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        return json.loads(out.read_text(encoding="utf-8"))


def _summary(doc: list[str]) -> str | None:
    """A docstring's first paragraph, when it is a query's length."""
    lo, hi = QUERY_WORDS
    return doc[0] if doc and lo <= len(doc[0].split()) <= hi and not doc[0].startswith(NOT_PROSE) else None


@cache
def passages() -> tuple[str, ...]:
    """The passages, deduplicated, in the corpus' order."""
    raw = _raw()
    texts = [p for p in raw["reference"] if prose(p)]
    texts += [p for doc in raw["docstrings"] for p in doc[1:] if prose(p)]
    return tuple(dict.fromkeys(texts))


@cache
def queries() -> tuple[str, ...]:
    """The queries (docstring summaries), deduplicated, none of them a passage."""
    known = set(passages())
    summaries = (_summary(doc) for doc in _raw()["docstrings"])
    return tuple(q for q in dict.fromkeys(s for s in summaries if s) if q not in known)


@cache
def query_pairs() -> tuple[tuple[str, str], ...]:
    """(query, passage) pairs that belong together: a docstring's summary and the first later paragraph
    of the same docstring that is a passage (one pair per query, the first docstring with the summary)."""
    pairs, seen, known = [], set(), set(queries())
    for doc in _raw()["docstrings"]:
        query = _summary(doc)
        later = next((p for p in doc[1:] if prose(p)), None)
        if query in known and later is not None and query not in seen:
            seen.add(query)
            pairs.append((query, later))
    return tuple(pairs)


@cache
def belonging() -> dict[str, frozenset[str]]:
    """query -> every passage that belongs with it: the later paragraphs of every docstring with that summary
    (query_pairs keeps one of them per query)."""
    known, found = set(queries()), {}
    for doc in _raw()["docstrings"]:
        query = _summary(doc)
        if query in known:
            found.setdefault(query, set()).update(p for p in doc[1:] if prose(p))
    return {query: frozenset(passages) for query, passages in found.items()}


def sample(texts, n: int, *, seed: int = 0) -> list:
    """n of texts (all of them if fewer), drawn with a seeded generator, in the drawn order."""
    texts = list(texts)
    return random.Random(seed).sample(texts, min(n, len(texts)))


def python_version() -> str:
    """The Python whose standard library the text comes from."""
    return _raw()["python"]


if __name__ == "__main__":  # the child: python -I -S human_text.py OUT.json
    Path(sys.argv[1]).write_text(json.dumps(collect()), encoding="utf-8")
