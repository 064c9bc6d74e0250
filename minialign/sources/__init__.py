"""Where model files come from, decided once by `resolve`: a local directory or file, or a Hugging Face
hub snapshot (files fetched as readers ask for them, from the cache when offline). May import: convert."""

from minialign.sources.hub import HubUnavailableError, looks_like_path
from minialign.sources.source import Source, resolve

__all__ = ["HubUnavailableError", "Source", "looks_like_path", "resolve"]


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
