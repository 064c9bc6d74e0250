"""The clean / corrupted view of `ma.explore`: activation patching's maps (ma.analysis.activation_patching, Meng et al.
2022's causal tracing; never re-implemented here) of a clean input and a corrupted one of the same token count.

    ma.explore(model, tokenizer, "The Eiffel Tower is in Paris.", corrupted="The Colosseum is in Paris.")

Two maps, each the fraction of the clean metric a patch restores, (patched - corrupted) / (clean - corrupted)
(`Patching.restored`): the residual stream, every layer's output ("layers.{i}.output") put back one position at a
time (layers x positions), and every head's context ("layers.{i}.attention.context", per="head": layers x heads).

The metric: an AlignModel's AlignScore probability (the tri head's "aligned", what the page shows among its heads);
any other model, the cosine between the clean run's embedding and the patched run's, the embedding its mean-pooled
last hidden state over the real tokens, or the one a caller's `metric` computes (the command line passes a
sentence-transformers directory's own pooling, dense layers and normalisation: products/probes.pooled_cosine). The
page says which.

Cost: one patched run of the input per patch (activation_patching batches them, patching.COPIES runs a forward: the
time is the runs' work, not the forwards' count), so the position map is left out where layers x tokens passes
POSITION_PATCHES, and the head map where layers x heads passes HEAD_PATCHES; the page says which was left out and why.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn import analysis

POSITION_PATCHES = 768  # the residual map's patched runs (layers x tokens): 12 layers x 64 tokens
HEAD_PATCHES = 576  # the head map's patched runs (layers x heads): 24 layers x 24 heads
ALIGNED = 0  # the tri head's "aligned" (data.py ALIGN_LABELS)


def metric_for(model: nn.Module, clean: dict[str, Tensor], real: Tensor) -> tuple[Callable, str]:
    """The page's default metric and the sentence naming it: an AlignModel's aligned probability; otherwise the
    cosine of the mean-pooled last hidden state over the `real` tokens (1, T) against the clean run's."""
    from minialign.models.head_models import AlignModel

    if isinstance(model, AlignModel):
        def aligned(output) -> Tensor:
            return torch.softmax(output.tri_label_logits.float(), dim=-1)[0, ALIGNED]
        return aligned, "the AlignScore probability (the tri head's \"aligned\")"

    def pooled(output) -> Tensor:  # (C,): the mean over the real tokens (products/pooling.py's mean)
        hidden = output.last_hidden_state.float()[0]  # (T, C)
        keep = real[0, :hidden.size(0)].to(hidden.device, hidden.dtype)[:, None]
        return (hidden * keep).sum(0) / keep.sum().clamp_min(1)

    with torch.no_grad():
        reference = pooled(model(**clean))

    def cosine(output) -> Tensor:
        return F.cosine_similarity(pooled(output), reference, dim=0)
    return cosine, ("the cosine between the clean run's embedding and the patched run's (the last hidden state "
                    "mean-pooled over the tokens)")


def patching_maps(model: nn.Module, prefix: str, clean: dict[str, Tensor], corrupted: dict[str, Tensor],
                  metric: Callable, said: str) -> dict:
    """The page's patching data: the metric named, its clean and corrupted values, and each map's restored fractions
    (residual: (layers, T) under "restored", heads: (layers, H)), or a note saying why a map is left out."""
    config, T = model.config, clean["input_ids"].size(1)
    layers, heads = config.num_layers, config.num_heads
    data: dict = {"metric": said}
    maps = {"residual": ([f"{prefix}layers.{i}.output" for i in range(layers)], "position", layers * T,
                         POSITION_PATCHES, f"{layers} layers x {T} tokens"),
            "heads": ([f"{prefix}layers.{i}.attention.context" for i in range(layers)], "head", layers * heads,
                      HEAD_PATCHES, f"{layers} layers x {heads} heads")}
    for key, (names, per, runs, budget, size) in maps.items():
        if runs > budget:
            data[key] = {"note": f"left out: {size} = {runs:,} patched runs, over the page's {budget:,}; "
                                 f"ma.analysis.activation_patching computes it outside the page"}
            continue
        result = analysis.activation_patching(model, clean, corrupted, metric, names, per=per)
        data["clean"], data["corrupted"] = result.clean, result.corrupted
        if result.clean == result.corrupted:
            data[key] = {"note": "the clean and corrupted runs have the same metric: there is nothing to restore"}
            continue
        restored = result.restored()
        data[key] = {"names": names, "restored": [[round(float(v), 5) for v in restored[name]] for name in names]}
    if "clean" not in data:  # both maps left out: the two runs' metric still said
        with torch.no_grad():
            data["clean"], data["corrupted"] = (float(metric(model(**clean))), float(metric(model(**corrupted))))
    return data
