"""The HTML page of `ma.explore`: page.html, page.css and page.js beside this module (package data that a linter
and a browser read as they are), assembled by `render` into one self-contained file: plain JavaScript and canvas, the
data embedded as JSON, nothing fetched (a Content-Security-Policy forbids every request). Every heat map has a legend
beside it (the quantity, its colour bar, the numbers at both ends); the enlarged attention map names its tokens on
both axes (every token, or every k-th on long inputs so that labels never overlap). A model whose scores have
position terms (DeBERTa's c2p / p2c: data.py `terms`) gets one more section (terms.html), the parts of its scores;
other models' pages hold no such section. The analysis sections (data.py `analysis`, from ma.analysis) draw every
head's entropy as a layers x heads map, the attention rollout (or flow) as a tokens x tokens map labelled as the
enlarged attention map is (one function draws both), and, for the token clicked, the residual decomposition's parts
as bars of their shares of the last hidden state, with the shares' sum; or the reason the decomposition is refused.
A page of a clean and a corrupted input (data.py `corrupted`) shows both texts and activation patching's two maps
(patching.py), each restored fraction on a scale symmetric about 0, with the metric named; other pages hide that
section."""

from __future__ import annotations

import html
import json
import re
from functools import cache
from importlib import resources

# In page.html, what render puts in its place: the style and the script inlined (the Content-Security-Policy forbids
# fetching them), and the page's parts (the texts, the cut note, the terms section, the data).
_SLOTS = re.compile(r'<link rel="stylesheet" href="page\.css">|<script src="page\.js"></script>'
                    r"|\{(cut|text|pair|corrupted|terms|data)\}")


@cache
def _asset(name: str) -> str:
    """A file of the page (page.html, page.css, page.js, terms.html), as the package holds it."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _text_block(name: str, seen: str, cut: int) -> str:
    """One text as the model saw it: the raw text up to its last kept token, and a mark where the window cut it."""
    mark = f' <span class="cut">[... {cut:,} token{"s" * (cut != 1)} cut]</span>' if cut else ""
    return f"<div><b>{name}</b>{' (as the model saw it)' if cut else ''}: {html.escape(seen, quote=False)}{mark}</div>"


def render(data: dict) -> str:
    """The page for `data` (explore.Exploration.data): the texts as far as the model saw them, never the cut part."""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=True).replace("</", "<\\/")
    cut = data["cut"]
    note = f'<p class="cut" id="cut">{html.escape(data["cut_note"], quote=False)}.</p>\n' if data["cut_note"] else ""
    pair = _text_block("Pair", data["pair"], cut["pair"]) if data.get("pair") is not None else ""
    terms = _asset("terms.html") if "terms" in data["runs"][0] else ""  # only a model whose scores have position terms
    corrupted = ""
    if (other := data.get("corrupted")) is not None:  # the clean / corrupted view: the corrupted input below the clean
        corrupted = _text_block("Corrupted text", other["text"], other["cut"]["text"])
        if other["pair"] is not None:
            corrupted += _text_block("Corrupted pair", other["pair"], other["cut"]["pair"])
    parts = {"cut": note, "text": _text_block("Text", data["text"], cut["text"]), "pair": pair,
             "corrupted": corrupted, "terms": terms, "data": payload}

    def fill(slot: re.Match) -> str:
        if slot.group(1):
            return parts[slot.group(1)]
        if slot.group(0).startswith("<link"):
            return "<style>\n" + _asset("page.css") + "</style>"
        return "<script>\n" + _asset("page.js") + "</script>"

    return _SLOTS.sub(fill, _asset("page.html"))  # one pass: a text may say "{pair}"
