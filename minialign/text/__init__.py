"""Text before the model: the tokenizer (+ pad; files read from a resolved source), the sentence
splitter, input checks (validation). May import: sources."""


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
