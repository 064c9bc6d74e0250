"""Task adapters chosen per call: LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3:
h = W0 x + B A x), one adapter per task as jina-embeddings-v3 carries them (jinaai/xlm-roberta-flash-implementation,
modeling_lora.py), kept apart from the weights and added to the layers' outputs while a task is chosen, so one loaded
model serves every task:

    Linear     y = activation(x W^T + b + scaling * (x A_t^T) B_t^T)     A_t (rank, in), B_t (out, rank)
    Embedding  y = W[ids] + scaling * A_t[ids] B_t                        A_t (num, rank), B_t (rank, dim)

jina's parametrization multiplies by the merged weight W + scaling * B_t A_t instead (what loading with `adapter=`
does once, convert/families/jina_embeddings_v3.py); the two agree to float32 rounding (tested). Both small products
run through nn/linear.py's Linear, so a row's result does not depend on the other rows of its batch. A Linear whose
activation oneDNN fused (the feed-forward's up projection) has it applied after the adapter's term instead, by the
same function (linear.activate). With no task chosen the layers run as loaded: the base weights, as XLMRobertaLoRA
runs without a task.

The adapters hang on the model as the attribute `task_adapters`, outside its module tree: its state dict, its export
and its capture names stay the plain encoder's. A task is chosen with `chosen(model, task)`, a context (contextvars:
one thread's choice is not another's), or by a runner's call option (SentenceEncoder.encode(adapter=)).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

import torch
from torch import Tensor, nn

from minialign.nn.linear import Linear, activate

# the adapters a forward in this context adds, and the task's index among theirs (`chosen`)
_CHOSEN: ContextVar[tuple[TaskAdapters, int] | None] = ContextVar("minialign_task_adapter", default=None)


class LowRank(nn.Module):
    """One layer's update for each task: the down (in -> rank) and up (rank -> out, `scaling` folded in) products of
    a Linear's adapters, or an Embedding's table of A rows and its up product."""

    def __init__(self, a: Tensor, b: Tensor, scaling: float, *, embedding: bool, device, dtype):
        super().__init__()
        self.embedding = embedding
        factory = {"device": device, "dtype": dtype}
        tasks = len(a)
        if embedding:  # A (task, num, rank), B (task, rank, dim)
            self.tables = nn.ParameterList(nn.Parameter(a[t].to(**factory), requires_grad=False) for t in range(tasks))
            down = None
            up_weights = [(b[t].float() * scaling).T for t in range(tasks)]
        else:  # A (task, rank, in), B (task, out, rank)
            down = [a[t] for t in range(tasks)]
            up_weights = [b[t].float() * scaling for t in range(tasks)]
        self.down = None if down is None else nn.ModuleList(_linear(w, **factory) for w in down)
        self.up = nn.ModuleList(_linear(w, **factory) for w in up_weights)

    def delta(self, x: Tensor, task: int) -> Tensor:
        """The task's term for the layer's input x (a Linear's (..., in) rows, an Embedding's ids)."""
        if self.embedding:
            return self.up[task](nn.functional.embedding(x, self.tables[task]))
        return self.up[task](self.down[task](x))


def _linear(weight: Tensor, *, device, dtype) -> Linear:
    layer = Linear(weight.shape[1], weight.shape[0], bias=False, device=device, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
    layer.weight.requires_grad_(False)
    return layer


class TaskAdapters(nn.Module):
    """A model's adapters (`attach`): its tasks, and for each adapted layer (by its path in the model) a LowRank."""

    def __init__(self, tasks: tuple[str, ...], layers: dict[str, LowRank]):
        super().__init__()
        self.tasks = tuple(tasks)
        self.layers = nn.ModuleDict({path.replace(".", "/"): low for path, low in layers.items()})

    def index(self, task: str) -> int:
        if task not in self.tasks:
            raise ValueError(f"adapter {task!r} is not one of this model's task adapters "
                             f"({', '.join(map(repr, self.tasks))})")
        return self.tasks.index(task)

    def linear_pre_hook(self, module: nn.Module, args: tuple, kwargs: dict):
        """While a task is chosen, the layer keeps its input (no `scratch`): the adapter's term reads it after."""
        if self.chosen_index() is not None and kwargs.get("scratch"):
            return args, {**kwargs, "scratch": False}
        return None

    def chosen_index(self) -> int | None:
        """The task index a forward in this context adds, where it chose these adapters (`chosen`)."""
        current = _CHOSEN.get()
        return current[1] if current is not None and current[0] is self else None


class LinearHook:
    """After a Linear: its output plus the chosen task's term, then the activation oneDNN would have fused (a class,
    not a closure: a model sent to worker processes pickles with its hooks)."""

    def __init__(self, adapters: TaskAdapters, path: str, activation: str | None):
        self.adapters, self.key, self.activation = adapters, path.replace(".", "/"), activation

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict, output: Tensor) -> Tensor:
        task = self.adapters.chosen_index()
        if task is not None:
            x = args[0] if args else kwargs["x"]
            output = output + self.adapters.layers[self.key].delta(x, task).to(output.dtype)
        return activate(output, self.activation)


class EmbeddingHook:
    """After an Embedding: its rows plus the chosen task's term."""

    def __init__(self, adapters: TaskAdapters, path: str):
        self.adapters, self.key = adapters, path.replace(".", "/")

    def __call__(self, module: nn.Module, args: tuple, output: Tensor) -> Tensor | None:
        task = self.adapters.chosen_index()
        if task is None:
            return None
        return output + self.adapters.layers[self.key].delta(args[0], task).to(output.dtype)


def attach(model: nn.Module, tasks: tuple[str, ...], scaling: float,
           layers: dict[str, tuple[Tensor, Tensor, bool]]) -> TaskAdapters:
    """Keep the adapters (by each adapted layer's path in `model`: its (A, B, embedding), every task's stacked, as
    convert.Adapters holds them) on `model` as `task_adapters`, in its parameters' device and dtype, and hook them on
    their layers; a layer the model does not have (another class's head) is left out."""
    weight = next(model.parameters())
    device, dtype = weight.device, weight.dtype
    present = dict(model.named_modules())
    low_ranks = {path: LowRank(a, b, scaling, embedding=embedding, device=device, dtype=dtype)
                 for path, (a, b, embedding) in layers.items() if path in present}
    adapters = TaskAdapters(tasks, low_ranks)
    for path in low_ranks:
        module = present[path]
        if isinstance(module, nn.Embedding):
            module.register_forward_hook(EmbeddingHook(adapters, path))
        elif isinstance(module, Linear):
            activation, module.activation = module.activation, None  # applied after the adapter's term (hook)
            module.register_forward_pre_hook(adapters.linear_pre_hook, with_kwargs=True)
            module.register_forward_hook(LinearHook(adapters, path, activation), with_kwargs=True)
        else:
            raise TypeError(f"{path}: an adapter on a {type(module).__name__}, neither a Linear nor an Embedding")
    model.__dict__["task_adapters"] = adapters  # outside the module tree (module docstring)
    return adapters


def adapters_of(model: nn.Module) -> TaskAdapters | None:
    return model.__dict__.get("task_adapters")


def check(model: nn.Module, task: str) -> TaskAdapters:
    """The adapters `model` keeps apart, where `task` is one of theirs; else a ValueError naming the choices."""
    adapters = adapters_of(model)
    if adapters is None:
        raise ValueError(f"adapter {task!r}: this model keeps no task adapters apart (only a checkpoint carrying them, "
                         f"jina-embeddings-v3's own, loaded without adapter=, does; with adapter= it was merged "
                         f"into the weights for good)")
    adapters.index(task)
    return adapters


@contextlib.contextmanager
def chosen(model: nn.Module, task: str | None) -> Iterator[None]:
    """Forwards of `model` in this context add `task`'s adapter (None: none, the base weights). A model that keeps no
    adapters apart, or a task it has none for, is a ValueError naming the choices (`check`)."""
    if task is None:
        yield
        return
    adapters = check(model, task)
    token = _CHOSEN.set((adapters, adapters.index(task)))
    try:
        yield
    finally:
        _CHOSEN.reset(token)
