"""The new paths the GPU suite runs where this checkout has them (a row for each, guarded, so the suite runs before
and after they land), each read from its one declaration."""

from __future__ import annotations


def backend(name: str) -> bool:
    """An attention backend of the table (minialign.nn.attention.BACKENDS: "varlen")."""
    from minialign.nn.attention import BACKENDS

    return name in BACKENDS


def compile_mode(name: str) -> bool:
    """A runner's `compile` by name (minialign.products.choices.COMPILE_MODES: "reduce-overhead")."""
    from minialign.products import choices

    return name in getattr(choices, "COMPILE_MODES", ())


def dtype_word(word: str) -> bool:
    """A precision word of `dtype=` (minialign.nn.choices.PRECISION_DTYPES: "auto-all")."""
    from minialign.nn import choices

    return word in getattr(choices, "PRECISION_DTYPES", ())
