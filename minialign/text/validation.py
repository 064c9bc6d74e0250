"""Input checks: what text the tokenizer takes, said once for every runner and face (a value that is
null, not a string, or not encodable is named with its index, before any model work)."""

from __future__ import annotations

from collections.abc import Sequence


def text_problem(text: str) -> str | None:
    """Why `tokenizers` cannot take this string, or None. Python strings may hold lone surrogates
    (from JSON escapes such as "\\ud83d"), which are not encodable text; everything else is taken
    (NUL and control characters are dropped or mapped to the unknown token by the normalizer)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds a lone surrogate (U+{ord(text[e.start]):04X} at character {e.start}), which is not encodable text"
    return None


def value_problem(value, *, null: str = "None") -> str | None:
    """Why a value is not text the tokenizer takes (null, not a string, not encodable), or None.
    `null` names a missing value (None in Python, null in JSON)."""
    if value is None:
        return f"is {null}"
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not a string"
    return text_problem(value)


def check_texts(name: str, texts) -> list[str]:
    """The texts as a list, or a ValueError naming every item that is not encodable text."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError(f"{name} must be a sequence of strings (a list), got {type(texts).__name__}")
    problems = [f"{name}[{i}] {problem}" for i, t in enumerate(texts) if (problem := value_problem(t))]
    if problems:
        raise ValueError("invalid input: " + "; ".join(problems))
    return list(texts)


def one_pair(first, second, names: tuple[str, str]) -> bool:
    """Whether a runner given (first, second) was given one pair as two strings (its result: that pair's alone);
    a string beside a list is a ValueError naming both, since neither reading is sure."""
    if isinstance(first, str) and isinstance(second, str):
        return True
    if isinstance(first, str) or isinstance(second, str):
        raise ValueError(f"{names[0]} and {names[1]}: give both as strings (one example) or both as lists, got "
                         f"{type(first).__name__} and {type(second).__name__}")
    return False
