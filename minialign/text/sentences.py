"""Rule-based English sentence splitting, no dependencies.

`split_sentences(text)` returns the sentences of `text` as stripped substrings, in order.
Built for news articles and summaries: abbreviations (Mr., Dr., Inc., e.g., U.S., p.m., months),
initials, decimals and prices, URLs, e-mail addresses and file names, ellipses, repeated ! and ?,
closing quotes and brackets after the stop, numbered lists, newlines and blank lines, and text
without a final stop. The original AlignScore used nltk's punkt; pass `splitter=nltk.sent_tokenize`
to AlignScorer for its exact segmentation.
"""

from __future__ import annotations

import re

# Never end a sentence: they precede a name or a number.
_TITLES = {"mr", "mrs", "ms", "dr", "prof", "st", "mt", "gen", "col", "lt", "sgt", "capt", "cmdr", "adm",
           "gov", "sen", "rep", "rev", "hon", "pres", "supt", "messrs", "mme", "mlle", "vs", "v", "cf", "ca",
           "approx", "dept", "fig", "figs", "vol", "vols", "pp", "p", "no", "nos", "ed", "eds", "op", "art"}
# End a sentence only when the next word is a usual sentence opener.
_AMBIGUOUS = {"inc", "ltd", "co", "corp", "bros", "llc", "plc", "etc", "jr", "sr", "esq", "al", "est",
              "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
              "mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun", "ave", "blvd", "rd"}
_OPENERS = {"the", "a", "an", "he", "she", "it", "they", "we", "i", "you", "this", "that", "these", "those",
            "there", "his", "her", "its", "their", "our", "my", "your", "in", "on", "at", "but", "and", "however",
            "after", "before", "when", "while", "if", "as", "for", "so", "then", "now", "meanwhile", "later",
            "also", "yet", "still", "what", "why", "how", "who", "where", "some", "many", "most", "all", "one",
            "two", "both", "each", "no", "not", "officials", "police", "mr", "mrs", "ms", "dr"}
_CLOSERS = "\"'”’)]}»"
_OPEN_QUOTES = "\"'“‘([{«"
_STOPS = ".!?…"
_CJK_STOP = re.compile(r"[。！？]+[" + re.escape(_CLOSERS) + r"」』]*")
_INITIALISM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # U.S, e.g, p.m, i.e (the last period is stripped)
_LIST_MARKER = re.compile(r"(?:\d{1,3}|[A-Za-z]|[ivxlcdm]{1,5})")
_BULLET = re.compile(r"^\s*(?:[-*•–]|\d{1,3}[.)]|[A-Za-z][.)])\s")


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences (stripped substrings). Empty or blank text gives []."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    sentences: list[str] = []
    for block in _blocks(text):
        for piece in _split_cjk(block):
            sentences.extend(_split_block(piece))
    return sentences


def _blocks(text: str) -> list[str]:
    """Paragraphs (blank lines) and lines. A single newline ends a sentence unless it looks like a
    hard wrap: the line does not end in a stop or colon and the next line starts in lower case."""
    blocks: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line for line in paragraph.split("\n") if line.strip()]
        current = ""
        for line in lines:
            if current and _is_wrap(current, line):
                current = f"{current}\n{line}"
            else:
                if current:
                    blocks.append(current)
                current = line
        if current:
            blocks.append(current)
    return blocks


def _is_wrap(previous: str, line: str) -> bool:
    end = previous.rstrip().rstrip(_CLOSERS)
    start = line.lstrip()
    return bool(end) and end[-1] not in _STOPS + ":;" and start[:1].islower() and not _BULLET.match(line)


def _split_cjk(block: str) -> list[str]:
    pieces, start = [], 0
    for match in _CJK_STOP.finditer(block):
        pieces.append(block[start:match.end()])
        start = match.end()
    pieces.append(block[start:])
    return [p for p in pieces if p.strip()]


def _split_block(block: str) -> list[str]:
    tokens = [(m.start(), m.end()) for m in re.finditer(r"\S+", block)]
    sentences, start, first = [], None, True
    for i, (s, e) in enumerate(tokens):
        if start is None:
            start, first = s, True
        token = block[s:e]
        following = block[tokens[i + 1][0]:tokens[i + 1][1]] if i + 1 < len(tokens) else None
        if _ends_sentence(token, following, first):
            sentences.append(block[start:e].strip())
            start = None
        first = False
    if start is not None:
        sentences.append(block[start:].strip())
    return [s for s in sentences if s]


def _ends_sentence(token: str, following: str | None, first_in_sentence: bool) -> bool:
    core = token.rstrip(_CLOSERS)
    if not core or core[-1] not in _STOPS:
        return False
    if following is None:
        return True
    if not _starts_sentence(following):
        return False
    if core[-1] in "!?":
        return True
    if core.endswith(("...", "…")):
        return True
    word = core.rstrip(".").lstrip(_OPEN_QUOTES)
    if not word:
        return True
    lower = word.lower()
    next_word = following.lstrip(_OPEN_QUOTES).rstrip(_CLOSERS + ".,;:!?").lower()
    if lower in _TITLES:
        return False
    if first_in_sentence and _LIST_MARKER.fullmatch(word):  # "1. First item", "a. option"
        return False
    if len(word) == 1 and word.isalpha() and word.isupper():  # an initial: "George W. Bush"
        return False
    if _INITIALISM.fullmatch(word) or lower in _AMBIGUOUS:
        return next_word in _OPENERS
    return True


def _starts_sentence(token: str) -> bool:
    """The next token can open a sentence: a capital, a digit, an opening quote or bracket, or a
    letter of a script without case."""
    head = token.lstrip(_OPEN_QUOTES) or token
    c = head[0]
    if c.isupper() or c.isdigit():
        return True
    if c.isalpha():
        return not c.islower()
    return c in _OPEN_QUOTES or not c.isalnum() and c not in ",;:.-–—"
