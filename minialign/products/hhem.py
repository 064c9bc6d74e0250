"""HHEM: Vectara's HHEM-2.1-open hallucination score (vectara/hallucination_evaluation_model), as its published
modeling code computes it (modeling_hhem_v2.py, HHEMv2ForSequenceClassification; its remote code does not run on
transformers 5, so minialign reads its checkpoint instead):

  model      `self.t5 = T5ForTokenClassification(AutoConfig.from_pretrained(config.foundation))` (__init__): the
             foundation's T5 encoder (google/flan-t5-base, HHEMv2Config.foundation) with a two-label token
             classifier, its weights under `t5.` in model.safetensors (t5.transformer.*, t5.classifier.*)
  tokenizer  `AutoTokenizer.from_pretrained(config.foundation)` (__init__): the foundation's (HHEM's repository
             ships none); `tokenizer=` or tokenizer files beside the weights take its place
  template   `self.prompt.format(text1=premise, text2=hypothesis)` (predict), HHEMv2Config.prompt:
             "<pad> Determine if the hypothesis is true given the premise?\\n\\nPremise: {text1}\\n\\nHypothesis:
             {text2}", config.json's `prompt` where it has one; tokenized with padding and no truncation
             (`tokenizer([...], return_tensors='pt', padding=True)`): the T5 tokenizer appends </s>, and the
             leading "<pad>" is a real token (id 0) the classifier reads
  score      `logits[:, 0, :]` (the first token's, "tok_cls"), `torch.softmax(logits, dim=-1)[:, 1]` (predict):
             P(consistent) in [0, 1], 1 the hypothesis supported by the premise, 0 hallucinated

Here the encoder is the t5 family (models/t5.py) and the classifier on the first token a ClassifierModel whose head
(Family.heads: the first token's state, no dense, out_proj) holds T5ForTokenClassification's `classifier`: its
logits are the token head's logits[:, 0, :], and the last layer runs for the first tokens alone. The window is
unbounded by default, as HHEM's predict cuts nothing (T5's relative positions have no table to outgrow);
`max_length` sets one, and a cut is reported as by every runner (products/runner.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
from torch import Tensor

from minialign import convert
from minialign.loading.checkpoints import Checkpoint
from minialign.loading.weights import build
from minialign.models.head_models import ClassifierModel
from minialign.nn.config import Config
from minialign.products import choices
from minialign.products.runner import LoadOptions, Loading, PairScorer
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.backend import TOKENIZER_FILES
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts

DEFAULT_MODEL = choices.HHEM_MODEL
MODEL_TYPE = "HHEMv2"  # HHEMv2Config.model_type
FOUNDATION = "google/flan-t5-base"  # HHEMv2Config.foundation
PROMPT = "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}"
PREFIX = "t5."  # HHEMv2ForSequenceClassification.t5: the T5ForTokenClassification's names under it
CONSISTENT = 1  # `transformed_probs[:, 1]`: the probability of class 1
LABELS = ("hallucinated", "consistent")  # by label index (CONSISTENT)
WEIGHTS = "model.safetensors"


class HHEM(PairScorer):
    """HHEM-2.1-open's score of (premise, hypothesis) pairs (module docstring): a PairScorer, so its faces are
    AlignScore's and MiniCheck's (score, check; `minialign score --method hhem`, /rows/hhem, Ray)."""

    mode = "hhem"  # recorded with file outputs
    truncation_unit, truncation_like = "pair(s)", "a window HHEM's own predict does not have"
    progress_label = "scoring"
    has_details = True  # score's return_details: each pair's truncated tokens

    def __init__(self, model: ClassifierModel, tokenizer: Tokenizer, *, prompt: str = PROMPT,
                 max_length: int | None = None, batch_size: int | None = None, max_tokens: int | None = None,
                 unpad: bool | None = None, workers: int = 1, compile: bool | str = False,
                 threads: int | None = None):
        """model: the T5 encoder with HHEM's classifier on the first token; prompt: the template (str.format of text1
        and text2). The other options: Runner._start."""
        if len(model.config.labels) != 2:
            raise ValueError(f"HHEM needs a two-label classifier (hallucinated, consistent), this one has "
                             f"{len(model.config.labels)}")
        try:
            prompt.format(text1="", text2="")
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            raise ValueError(f"HHEM's prompt must be a str.format template of text1 and text2 alone, got "
                             f"{prompt!r} ({error!r})") from None
        self.prompt = prompt
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path = DEFAULT_MODEL, *, foundation: str | Path | None = None,
                        max_length: int | None = None, **keywords: Unpack[Loading]) -> HHEM:
        """An HHEM-2.1-open directory or hub id: config.json (model_type "HHEMv2", its `foundation` and `prompt`)
        and model.safetensors (the T5ForTokenClassification under `t5.`). The T5 config (and, unless the directory
        holds one or `tokenizer=` names one, the tokenizer) come from the foundation, a directory or hub id
        (`foundation`, default config.json's, else HHEMv2Config's google/flan-t5-base), as HHEM's __init__ reads
        them. max_length: the window (None: none, as HHEM's predict). The keywords every runner takes are
        products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        hhem = json.loads(source.file("config.json").read_text(encoding="utf-8"))
        if hhem.get("model_type") != MODEL_TYPE:
            raise ValueError(f"{source}: config.json's model_type is {hhem.get('model_type')!r}, not {MODEL_TYPE!r} "
                             f"(HHEM-2.1-open's HHEMv2Config); a T5ForTokenClassification directory loads with "
                             f"ma.TokenClassifier")
        base = resolve(foundation or hhem.get("foundation") or FOUNDATION, cache_dir=load.cache_dir)
        config = Config.from_hf(json.loads(base.file("config.json").read_text(encoding="utf-8")),
                                source=f"{base}/config.json")
        if config.arch != "t5":
            raise ValueError(f"{base}: HHEM's foundation must be a T5 model (flan-t5), its model_type is "
                             f"{config.arch!r}")
        tensors = {name.removeprefix(PREFIX): t for name, t in convert.read_safetensors(source.file(WEIGHTS)).items()}
        renamed, dropped = convert.hf_to_minialign(tensors, config.format, source=f"{source}/{WEIGHTS}")
        rows = renamed.get("classifier.out_proj.weight")
        if rows is not None and rows.size(0) != len(LABELS):
            raise ValueError(f"{source}: HHEM's classifier has {rows.size(0)} labels, not 2 (hallucinated, "
                             f"consistent)")
        ckpt = Checkpoint(dataclasses.replace(config, labels=LABELS), renamed, f"{source}/{WEIGHTS}", layout="hf",
                          dropped=dropped)
        model = build(ClassifierModel, ckpt, require=("classifier",),
                      advice="HHEM's model.safetensors holds t5.classifier.weight and .bias",
                      **load.only("device", "dtype", "attn_backend"))
        # beside the weights where the directory holds one, else the foundation's (fetched from the hub by name)
        tokenizer = load.open_tokenizer(source if source.present(TOKENIZER_FILES[:1]) else base)
        window = max_length if max_length is not None else model.config.max_seq_len
        runner = cls(model, tokenizer, max_length=window, prompt=hhem.get("prompt") or PROMPT, **load.engine())
        runner.source = str(src)
        return runner

    def texts(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """Each (premise, hypothesis) in the template (predict's `self.prompt.format(**pair)`)."""
        return [self.prompt.format(text1=premise, text2=hypothesis) for premise, hypothesis in pairs]

    def predict(self, pairs: Sequence[tuple[str, str]], *, progress: bool = False,
                warn_truncation: bool | None = None, tally: Truncation | None = None) -> Tensor:
        """(N,) float32 scores in [0, 1] of (premise, hypothesis) pairs, row i for pair i: P(consistent), 1 the
        hypothesis supported by the premise (HHEMv2ForSequenceClassification.predict). Text cut by a window is
        reported as by every runner (warn_truncation, tally: products/runner.py)."""
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
            raise ValueError(f"pairs must be a list of (premise, hypothesis) pairs, got {type(pairs).__name__}")
        bad = [i for i, pair in enumerate(pairs) if not isinstance(pair, (tuple, list)) or len(pair) != 2]
        if bad:
            raise ValueError(f"pairs must be (premise, hypothesis) pairs; item {bad[0]} is {pairs[bad[0]]!r}")
        check_texts("premises", [p for p, _ in pairs])
        check_texts("hypotheses", [h for _, h in pairs])
        return self._scores(pairs, progress, warn_truncation, tally)[0]

    def _scores(self, pairs, progress, warn_truncation, tally) -> tuple[Tensor, Tensor]:
        """(N,) P(consistent) and (N,) the tokens each pair's text lost to the window."""
        if not pairs:
            return torch.empty(0), torch.empty(0, dtype=torch.long)
        results = self.run(self.texts(pairs), progress=progress)
        self._count(results.truncated, warn_truncation, tally)
        return results.values[:, CONSISTENT], results.truncated

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """(b, 2) float32 probabilities of one batch (predict's `torch.softmax(logits, dim=-1)`)."""
        return torch.softmax(self.model(**batch, unpad=self.unpad).logits.float(), dim=-1)

    def score(self, contexts: Sequence[str], claims: Sequence[str], *, return_details: bool = False,
              progress: bool = False, warn_truncation: bool | None = None,
              tally: Truncation | None = None) -> list[float] | list[dict]:
        """PairScorer's call (the faces'): predict's scores of (contexts[i], claims[i]) as a list; with
        return_details, per pair {"score", "truncated": the tokens its text lost to the window}."""
        if len(contexts) != len(claims):
            raise ValueError(f"contexts and claims must be as long: {len(contexts)} and {len(claims)}")
        pairs = list(zip(check_texts("contexts", contexts), check_texts("claims", claims)))
        scores, truncated = self._scores(pairs, progress, warn_truncation, tally)
        if return_details:
            return [{"score": s, "truncated": n} for s, n in zip(scores.tolist(), truncated.tolist())]
        return scores.tolist()

    def settings(self, **options) -> dict:
        return {**super().settings(), "prompt": self.prompt}
