"""Text before the model: the tokenizer (tokenizer.py, + pad; its `tokenizers` backend read from the files of a
resolved source: backend.py), the sentence splitter (sentences.py), input checks (validation.py).
May import: sources."""


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
