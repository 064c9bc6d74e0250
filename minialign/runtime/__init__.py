"""Running models on inputs: the batching engine (+ the truncation report), the process pool, the
service's request queue, memory release, the count of a forward's host syncs. May import: text, nn (the layout's
HostBatch, which the engine builds for each batch). Models come in as forward callables."""


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
