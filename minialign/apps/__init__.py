"""The faces: command line, HTTP service, Ray Data, file jobs, explore, parity. May import anything below;
nothing imports apps."""


def extra_hint(extra: str) -> str:
    """How to install one of the package's extras. minialign is not on the package index yet, so the command is
    the one that works from a checkout of the repository (README.md, "Set up")."""
    return f'from a checkout of minialign: pip install -e ".[{extra}]"'


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
