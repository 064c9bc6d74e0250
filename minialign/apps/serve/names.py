"""The names a loaded model is served by: the name a request's `model` gives (OpenAI's /v1/embeddings, Cohere's
/v1/rerank and /v2/rerank, TEI's /embed_all, /tokenize and /decode) and the name answers and /metrics carry.

A model's served name is `--served-model-name` where given (TEI's and vLLM's flag), else the model's own id where its
files name it, else the name it was loaded by:

  - a hub id (`--embed sentence-transformers/all-MiniLM-L6-v2`) is its own id;
  - a directory in the hub's cache (`.../models--ORG--NAME/snapshots/REV`) is ORG/NAME;
  - a directory whose model card (README.md) loads it by id, in the usage snippet sentence-transformers' model cards
    write (`SentenceTransformer("ORG/NAME")`, `CrossEncoder(...)`, `SparseEncoder(...)`; transformers' cards:
    `AutoModel....from_pretrained("ORG/NAME")`), is the first such ORG/NAME, not the placeholder a card of an
    unpublished model holds (sentence_transformers/base/model_card.py: "sentence_transformers_model_id");
  - else the directory's path as given.

config.json's `_name_or_path` is not read: it names where the weights were first loaded from, the base model of a
fine-tuned one (the all-MiniLM-L6-v2 package's says "nreimers/MiniLM-L6-H384-uncased"), and transformers 5 no longer
writes it. A request may give the served name, its last part ("all-MiniLM-L6-v2"), or the name the model was loaded by
and its last part; answers carry the served name. The service decides each name at start (serve/core.Core): a request's
name is only compared, never opened.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath, PureWindowsPath

# the usage snippet of a model card: a loader called with a hub id "ORG/NAME"
_CARD_ID = re.compile(r"""(?:SentenceTransformer|CrossEncoder|SparseEncoder|\.from_pretrained)\(\s*["']"""
                      r"""([A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9])["']""")
_HUB_CACHE = re.compile(r"^models--([^/\\]+?)--([^/\\]+)$")
CARD_BYTES = 200_000  # a model card's first bytes read for its usage snippet


def last_part(name: str) -> str:
    """A path's or hub id's last part ("/models/all-MiniLM-L6-v2/" and "ORG/all-MiniLM-L6-v2": "all-MiniLM-L6-v2")."""
    return PureWindowsPath(name).name if "\\" in name else PurePosixPath(name.rstrip("/")).name


def model_id(src: str) -> str:
    """The id a model loaded from `src` goes by (the module docstring): its hub id where `src` or its files name one,
    else `src`."""
    path = Path(src).expanduser()
    if not path.exists():
        return src  # a hub id (sources.resolve decided it when the model loaded)
    directory = path if path.is_dir() else path.parent
    for part in (directory, *directory.parents)[:3]:  # .../models--ORG--NAME/snapshots/REV
        if match := _HUB_CACHE.match(part.name):
            return f"{match[1]}/{match[2]}"
    card = directory / "README.md"
    if path.is_dir() and card.is_file():
        with card.open("r", encoding="utf-8", errors="replace") as f:
            if match := _CARD_ID.search(f.read(CARD_BYTES)):
                return match[1]
    return src


def accepted(served: str, loaded_as: str | None = None) -> list[str]:
    """The names a request may give for a model served as `served` and loaded as `loaded_as`, the served one first."""
    names = [served, last_part(served)]
    if loaded_as:
        names += [loaded_as, last_part(loaded_as)]
    return list(dict.fromkeys(n for n in names if n))
