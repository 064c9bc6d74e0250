"""The encoder's parts, shared by every family: config, activations, Linear, the shared layers
(layers.py), attention and its backends (attention.py, flex.py), masks, layout, score functions,
capture, initialisation. Nothing here names a family (models/<family>.py does). May import: torch, convert."""


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
