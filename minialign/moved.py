"""Module paths from before the package was split into folders (0.1, flat), still importable:
`from minialign.scorer import AlignScorer` imports minialign.products.alignscore and warns once
(DeprecationWarning) that the path moved. One table; README ("Code map") lists the new paths."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module (minialign.<name>) -> where it lives now
MOVED = {
    "attention": "minialign.nn.attention",
    "batcher": "minialign.runtime.request_queue",
    "batchfile": "minialign.apps.files.rows",
    "batching": "minialign.runtime.engine",
    "classifier": "minialign.products.classifier",
    "cli": "minialign.apps.cli",
    "config": "minialign.nn.config",
    "embedding": "minialign.products.embeddings",
    "explore": "minialign.apps.explore",
    "explore_page": "minialign.apps.explore.page",
    "flex": "minialign.nn.flex",
    "hub": "minialign.sources.hub",
    "jobs": "minialign.apps.files.jobs",
    "layout": "minialign.nn.layout",
    "linear": "minialign.nn.linear",
    "losses": "minialign.products.losses",
    "masks": "minialign.nn.masks",
    "memory": "minialign.runtime.memory",
    "minicheck": "minialign.products.minicheck",
    "model": "minialign.models",
    "parity": "minialign.apps.parity",
    "raydata": "minialign.apps.raydata",
    "scorer": "minialign.products.alignscore",
    "scores": "minialign.nn.score_functions",
    "sentences": "minialign.text.sentences",
    "serve": "minialign.apps.serve",
    "tokenizer": "minialign.text.tokenizer",
    "tracing": "minialign.nn.capture",
    "workers": "minialign.runtime.process_pool",
}


def _target(old: str) -> str:
    new = MOVED[old]
    warnings.warn(f"minialign.{old} moved to {new}; the old path will be removed in a later release",
                  DeprecationWarning, stacklevel=4)
    return new


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `minialign.<old>` as the module it moved to: the same module object, so classes,
    isinstance checks and pickles agree whichever path named them."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.partition(".")
        if package == "minialign" and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def __init__(self):
        self._specs = {}

    def create_module(self, spec):
        module = importlib.import_module(_target(spec.name.partition(".")[2]))
        self._specs[spec.name] = module.__spec__  # the import system sets __spec__ on what this returns
        return module

    def exec_module(self, module):
        module.__spec__ = self._specs.pop(module.__spec__.name)  # already executed under its new name


def attribute(name: str):
    """`minialign.<old>` read as an attribute of the package."""
    if name in MOVED:
        return importlib.import_module(f"minialign.{name}")
    raise AttributeError(f"module 'minialign' has no attribute {name!r}")


if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
    sys.meta_path.append(_OldPaths())
