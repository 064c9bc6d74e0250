"""The hooks a capture or patch session (nn/capture.py) registers on the modules its module paths name, while it is
open: "layers.2.ffn.up:input" reads (and a patch replaces) the module's first positional input, ":output" its
output (a tuple's first element: a layer returns (x, probs)), as nnsight's `model.layers[2].ffn.up.input` /
`.output`; and the module a capture's `stop_after` names. A module no path names gets no hook: nothing is paid
for the paths not asked."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence

import torch.nn as nn
from torch import Tensor

# what a hook calls back: whether its session is the caller's (capture.current() is it), and the session's
# Capture.apply(name, tensor, scope=...) -> what the forward goes on with
Active = Callable[[], bool]
Apply = Callable[..., Tensor]


def module_paths(keys: Sequence[str], modules: dict[str, nn.Module], model: nn.Module,
                 matches: Callable[[str, str], bool]) -> dict[str, tuple[bool, bool]]:
    """The modules the module paths among a session's `keys` (names, patches) match (capture.matches): path -> (its
    input is read, its output is read). A path no module has is an error naming the close ones."""
    found: dict[str, tuple[bool, bool]] = {}
    for key in dict.fromkeys(keys):
        if ":" not in key:
            continue
        path, _, part = key.rpartition(":")
        if part not in ("input", "output"):
            raise ValueError(f"{key!r}: a module path ends in ':input' or ':output' (its first positional input, or "
                             f"its output)")
        hits = [name for name in modules if matches(name, path)]
        if not hits:
            close = difflib.get_close_matches(path, list(modules), n=5, cutoff=0.5)
            raise ValueError(f"no module of {type(model).__name__} has the path {path!r}"
                             + (f"; close: {', '.join(close)}" if close else "") + " (model.named_modules())")
        for name in hits:
            reads_input, reads_output = found.get(name, (False, False))
            found[name] = (reads_input or part == "input", reads_output or part == "output")
    return found


def read_input(name: str, active: Active, apply: Apply):
    """A forward pre-hook reading (and patching) the module's first positional input as "name:input"."""
    def hook(module, args):
        if not active():
            return None
        if not args or not isinstance(args[0], Tensor):
            got = type(args[0]).__name__ if args else "nothing positional"
            raise TypeError(f"{name}:input is the module's first positional input, a tensor; it got {got}")
        new = apply(f"{name}:input", args[0], scope=name)
        return None if new is args[0] else (new, *args[1:])
    return hook


def read_output(name: str, active: Active, apply: Apply):
    """A forward hook reading (and patching) the module's output (a tuple's first element) as "name:output"."""
    def hook(module, args, output):
        if not active():
            return None
        first = output[0] if isinstance(output, tuple) and output else output  # a layer's (x, probs): x
        if not isinstance(first, Tensor):
            raise TypeError(f"{name}:output is the module's output, a tensor (or a tuple's first); it is a "
                            f"{type(first).__name__}")
        new = apply(f"{name}:output", first, scope=name)
        if new is first:
            return None
        return (new, *output[1:]) if first is not output else new
    return hook


def stop_path(stop: str | int, modules: dict[str, nn.Module], model: nn.Module) -> str:
    """The module `stop_after` names: its path, or the encoder's layer `stop` ("layers.i", "encoder.layers.i")."""
    if isinstance(stop, int) and not isinstance(stop, bool):
        hits = [name for name in modules if name == f"layers.{stop}" or name.endswith(f".layers.{stop}")]
        if len(hits) != 1:
            raise ValueError(f"stop_after={stop}: {type(model).__name__} has "
                             + (f"the layers {', '.join(hits)}: name one by its path" if hits else "no such layer"))
        return hits[0]
    if stop not in modules:
        close = difflib.get_close_matches(str(stop), list(modules), n=5, cutoff=0.5)
        raise ValueError(f"stop_after={stop!r}: no module of {type(model).__name__} has that path"
                         + (f"; close: {', '.join(close)}" if close else ""))
    return stop
