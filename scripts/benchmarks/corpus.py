"""Seeded texts the benchmark and the reference scripts share: news-like sentences of one vocabulary,
AlignScore's length mix of contexts and claims, and mixed-length texts for embeddings."""

from __future__ import annotations

import random

WORDS = ("the a of to in and for on with said at by from his her its their was were has have had will would "
         "could government minister company police court president city officials report year people market "
         "shares percent million billion new first last two three after before over under during while since "
         "election vote party leader team season game players club coach match win loss record fans stadium "
         "study researchers found data results university hospital patients health drug treatment disease "
         "weather storm rain flood river bridge road traffic train airport flight passengers border troops "
         "war peace talks deal trade tax budget economy growth prices oil gas energy climate carbon emissions "
         "school students teachers children parents family home house street town village county state nation "
         "world country europe america china india africa london paris monday tuesday wednesday thursday friday").split()

# Context lengths in words of AlignScore's scoring mix: a third each of short, medium and long contexts.
CONTEXT_WORDS = ((20, 59), (120, 420), (500, 1400))


def sentence(rng: random.Random, most: int = 22) -> str:
    """One sentence of 8-22 words of WORDS (at most `most`), capitalised, with a full stop."""
    words = [rng.choice(WORDS) for _ in range(min(rng.randint(8, 22), most))]
    return " ".join(words).capitalize() + "."


def text(rng: random.Random, lo: int, hi: int) -> str:
    """Sentences of 8-22 words (the last one shortened to fit) totalling a random lo..hi words."""
    left, sentences = rng.randint(lo, hi), []
    while left > 0:
        sentences.append(sentence(rng, most=left))
        left -= len(sentences[-1].split())
    return " ".join(sentences)


def context_mix(rng: random.Random, n: int) -> list[str]:
    """n contexts cycling through CONTEXT_WORDS: short, medium, long, short, ..."""
    return [text(rng, *CONTEXT_WORDS[i % len(CONTEXT_WORDS)]) for i in range(n)]


def scoring_corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A third short contexts (< 60 words), a third 120-420, a third 500-1400; claims of 1-4 sentences."""
    rng = random.Random(seed)
    contexts = context_mix(rng, n)
    claims = [" ".join(sentence(rng) for _ in range(rng.randint(1, 4))) for _ in range(n)]
    return contexts, claims


def mixed_texts(n: int, seed: int = 1, lo: int = 3, hi: int = 200) -> list[str]:
    """n texts of lo..hi words (sentences of the scoring corpus's vocabulary)."""
    rng = random.Random(seed)
    return [text(rng, lo, hi) for _ in range(n)]
