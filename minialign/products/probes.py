"""Embedding workflows for interpretability: a SentenceEncoder's own embedding read off an encoder forward, a metric
of it for activation patching and attribution, and steering vectors.

    inputs = probes.text_inputs(runner, ["A man plays the guitar."])        # what encode runs, as model keywords
    embedding = probes.embedding_of(runner, runner.model(**inputs), inputs["attention_mask"])   # == runner.encode
    metric = probes.pooled_cosine(runner, embedding, inputs["attention_mask"])
    ma.analysis.activation_patching(runner.model, clean, corrupted, metric, ["layers.*.output"], per="position")
    vector = probes.steering_vector(runner, positive_texts, negative_texts, "layers.3.output")
    with ma.patch(runner.model, {"layers.3.output": ma.steer(vector, scale=4.0)}):
        steered = runner.encode(texts)

`embedding_of` is the runner's pipeline after the encoder (SentenceEncoder.forward: the pooling of products/pooling.py,
less a prompt's tokens where the Pooling module leaves them out, each Dense, Normalize) and then encode's (the
truncate_dim kept, normalize_embeddings), so a forward of `text_inputs` gives what `encode` returns for the same texts.
A metric of it reads either an EncoderOutput or the last hidden state (B, L, C) itself, which direct attribution
hands it.

Steering vectors are mean differences of activations (Turner et al. 2023, "Activation Addition: Steering Language
Models Without Optimization": the difference of one pair of prompts' activations; Rimsky et al. 2024, "Steering
Llama 2 via Contrastive Activation Addition": the mean difference over many pairs): here each text's mean over its
real tokens, averaged over the texts of each set, positive minus negative.

`runner.encode` under `ma.patch(runner.model, ...)` is steered because the batching engine runs every forward on the
calling thread (runtime/engine.py `_here`: only the next batch's collation runs ahead in a background thread), where
the patch is open (a session belongs to the thread that opened it: nn/capture.py). A runner loaded with workers > 1
runs its batches in its worker processes, except while a capture or patch is open on the calling thread: then
every batch runs here (BatchEngine.execute), so the session sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn.capture import capture
from minialign.products.choices import EMBED_NORMALIZE
from minialign.products.embeddings import SentenceEncoder, finish
from minialign.products.quantization import check_truncate_dim
from minialign.text.tokenizer import pad
from minialign.text.validation import check_texts


def text_inputs(runner: SentenceEncoder, texts: Sequence[str], *, prompt_name: str | None = None,
                prompt: str | None = None) -> dict[str, Tensor]:
    """The model keywords (input_ids, attention_mask and, where the tokenizer has them, token_type_ids; (B, L),
    right-padded, on the model's device) of what `runner.encode(texts, prompt_name=, prompt=)` runs: the prompt put
    first as encode puts it, tokenized by the batching engine's own call under the runner's window."""
    prompted, _ = runner._prompted(check_texts("texts", texts), _prompt(runner, prompt_name, prompt))
    encoded = runner.engine.tokenize(prompted)  # encode's tokenizer call (BatchEngine.run), unpadded
    batch = pad(encoded.ids, encoded.type_ids, pad_id=runner.tokenizer.pad_token_id,
                token_types=runner.tokenizer.return_token_type_ids)
    device = next(runner.model.parameters()).device
    return {name: t.to(device) for name, t in batch.items()}


def embedding_of(runner: SentenceEncoder, output, attention_mask: Tensor, *, prompt_name: str | None = None,
                 prompt: str | None = None, truncate_dim: int | None = None,
                 normalize_embeddings: bool = EMBED_NORMALIZE) -> Tensor:
    """(B, D) float32: the embeddings `runner.encode` returns for the texts of an encoder forward. output: the
    forward's EncoderOutput, or its last hidden state (B, L, C); attention_mask (B, L): its real tokens (1 = real),
    as `text_inputs` gives them. The options are encode's, with its defaults (the prompt's tokens are left out where
    the runner's Pooling module leaves them out). Differentiable: no gradient is stopped."""
    hidden = output if isinstance(output, Tensor) else output.last_hidden_state  # (B, L, C)
    if hidden.dim() != 3:
        raise ValueError(f"embedding_of reads a last hidden state (B, L, C), got a tensor of shape "
                         f"{tuple(hidden.shape)}")
    mask = attention_mask[:, :hidden.size(1)].to(hidden.device)
    if mask.dim() != 2 or mask.size(0) != hidden.size(0):
        raise ValueError(f"attention_mask must be (B, L) = {tuple(hidden.shape[:2])}, got "
                         f"{tuple(attention_mask.shape)}")
    # SentenceEncoder.forward after the encoder, then SentenceEncoder.encode after the engine
    x = runner.embed_state(hidden, mask, prompt_length=_prompt_length(runner, prompt_name, prompt))
    truncate_dim = check_truncate_dim(truncate_dim if truncate_dim is not None else runner.truncate_dim)
    return finish(x, truncate_dim=truncate_dim, normalize_embeddings=normalize_embeddings)


def pooled_cosine(runner: SentenceEncoder, reference: Tensor, attention_mask: Tensor, *, reduce: bool = True,
                  **options) -> Callable[[object], Tensor]:
    """metric(output) -> the cosine between the runner's embedding of a forward (`embedding_of`, under the model's own
    pooling, dense layers and normalisation) and `reference` ((D,) for every row, or (B, D), e.g. the clean run's
    embedding or `runner.encode` of a target text): one number, the mean over the batch (reduce=False: (B,)).
    output: an EncoderOutput (ma.analysis.activation_patching hands it one) or the last hidden state (B, L, C)
    (direct attribution). attention_mask: the real tokens of the runs it scores (the clean and corrupted inputs of
    activation patching have the same); options: embedding_of's."""
    reference = reference.detach().float()
    if reference.dim() not in (1, 2):
        raise ValueError(f"reference must be one embedding (D,) or one per row (B, D), got {tuple(reference.shape)}")

    def metric(output) -> Tensor:
        embedding = embedding_of(runner, output, attention_mask, **options)  # (B, D)
        if reference.size(-1) != embedding.size(-1):
            raise ValueError(f"the reference is {reference.size(-1)} wide and the runner's embedding "
                             f"{embedding.size(-1)}: compare embeddings made with the same options")
        cosine = F.cosine_similarity(embedding, reference.to(embedding.device).expand_as(embedding), dim=-1)  # (B,)
        return cosine.mean() if reduce else cosine
    return metric


def steering_vector(source: SentenceEncoder | nn.Module, positive, negative, name: str, *,
                    prompt_name: str | None = None, prompt: str | None = None) -> Tensor:
    """(C,) float32: the mean activation `name` (a (B, L, C) one, such as "layers.3.output") over the positive
    inputs less its mean over the negative ones (the module docstring). source: a SentenceEncoder, with positive and
    negative lists of texts (run as encode runs them: `text_inputs`, with its prompt options), or a model, with
    positive and negative its keyword arguments (input_ids, attention_mask, ...). A text's mean is over its real
    tokens (its attention_mask), then the texts' means are averaged, so a long text weighs as much as a short one."""
    means = []
    for which, inputs in (("positive", positive), ("negative", negative)):
        if isinstance(source, SentenceEncoder):
            model, inputs = source.model, text_inputs(source, inputs, prompt_name=prompt_name, prompt=prompt)
        elif isinstance(inputs, Mapping):
            model = source
        else:
            raise ValueError(f"{which}: with a model, give its keyword arguments (input_ids, attention_mask, ...); "
                             f"texts need a SentenceEncoder, got {type(inputs).__name__}")
        means.append(_mean_activation(model, dict(inputs), name, which))
    return means[0] - means[1]


def _mean_activation(model: nn.Module, inputs: dict[str, Tensor], name: str, which: str) -> Tensor:
    """(C,): `name`'s mean over each input's real tokens, averaged over the inputs."""
    ids = inputs.get("input_ids")
    mask = inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones(ids.shape, dtype=torch.long, device=ids.device)
    with torch.no_grad(), capture(model, names=[name]) as cap:
        model(**inputs)
    if name not in cap:
        raise ValueError(f"{name!r} was not recorded by the forward: name one activation (ma.capture's names)")
    activation = cap[name]
    if activation.dim() != 3 or tuple(activation.shape[:2]) != tuple(mask.shape):
        raise ValueError(f"a steering vector is read off a (B, L, C) activation over the {which} inputs' "
                         f"{tuple(mask.shape)} tokens; {name} is {tuple(activation.shape)}")
    real = mask.to(device=activation.device, dtype=torch.float32)[..., None]  # (B, L, 1)
    per_input = (activation.float() * real).sum(dim=1) / real.sum(dim=1).clamp_min(1)  # (B, C)
    return per_input.mean(dim=0)


def _prompt(runner: SentenceEncoder, prompt_name: str | None, prompt: str | None) -> str | None:
    return runner.resolve_prompt(prompt_name=prompt_name, prompt=prompt)


def _prompt_length(runner: SentenceEncoder, prompt_name: str | None, prompt: str | None) -> int:
    """The prompt tokens pooling leaves out, as encode's batches carry them (SentenceEncoder._prompted)."""
    _, constants = runner._prompted([""], _prompt(runner, prompt_name, prompt))
    return (constants or {}).get("prompt_length", 0)
