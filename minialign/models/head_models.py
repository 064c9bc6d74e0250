"""The models with heads on the Encoder, in reading order: AlignScore's AlignModel, and transformers'
*ForSequenceClassification, *ForMaskedLM, *ForTokenClassification, *ForQuestionAnswering of every family
(ClassifierModel, MaskedLMModel, TokenClassifierModel, QuestionAnsweringModel), each with its output. Which
head a family has is the value it declares (family.py); the head modules and what each computes are heads.py's.

Shapes: B batch, L sequence length, C hidden size, V vocab.

Reference implementations: transformers models/bert/modeling_bert.py (BertFor*) and
models/roberta/modeling_roberta.py (RobertaFor*) (v4.x-v5.x), AlignScore src/alignscore/model.py (BERTAlignModel).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
from torch import Tensor

from minialign.loading.pretrained import Pretrained
from minialign.models.encoder import Encoder
from minialign.models.family import family_of
from minialign.models.heads import MLMHead, QuestionAnswering, SequenceClassificationHead, TokenHead
from minialign.nn.config import Config
from minialign.nn.init import init_weights
from minialign.nn.layout import HostBatch
from minialign.nn.linear import Linear


def _two_labels(config: Config) -> Config:
    """transformers' default num_labels = 2, where a config has no labels."""
    return config if config.labels else dataclasses.replace(config, labels=("LABEL_0", "LABEL_1"))


def _question_answering(config: Config) -> QuestionAnswering:
    """The family's question-answering head; a family transformers has none for says so (heads.py Heads)."""
    kind = family_of(config).heads(config).question_answering
    if isinstance(kind, str):
        raise ValueError(kind)
    return kind


@dataclass
class AlignOutput:
    tri_label_logits: Tensor  # (B, 3): 0 aligned, 1 neutral, 2 contradiction
    seq_relationship_logits: Tensor  # (B, 2): 1 aligned
    reg_label_logits: Tensor  # (B, 1)
    prediction_logits: Tensor | None = None  # (B, L, V), only with mlm=True
    last_hidden_state: Tensor | None = None  # (B, L, C) with mlm=True, else (B, 1, C): the first tokens
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class _OnEncoder:
    """What a model with heads on `encoder` passes on to it."""

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Encoder.prune_heads on this model's encoder; its config records them too."""
        self.encoder.prune_heads(heads_to_prune)
        self.config = replace(self.config, pruned_heads=self.encoder.config.pruned_heads)


class AlignModel(_OnEncoder, Pretrained):
    """AlignScore's BERTAlignModel: an Encoder, the MLM head and three heads on the pooled first token."""

    checkpoint_prefix = ""  # see Encoder: a checkpoint's tensors are under AlignModel's names
    initialisable = ("mlm_head", "bin_layer", "tri_layer", "reg_layer")

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=True)),
                "mlm_head", "bin_layer", "tri_layer", "reg_layer")

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        """A randomly initialised model (BERT's initialisation; `seed` makes it reproducible)."""
        super().__init__()
        if config.embedding_width != config.hidden_size:
            raise ValueError(f"AlignModel needs embeddings as wide as the encoder: its MLM head maps hidden_size "
                             f"({config.hidden_size}) onto the word embeddings, which this {config.arch} config makes "
                             f"embedding_size ({config.embedding_width}) wide; load it as an Encoder or ClassifierModel")
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=True)  # the heads read it
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.mlm_head = MLMHead(config, family_of(config).heads(config).masked_lm)
            self.dropout = nn.Dropout(0.1)  # AlignScore model.py: nn.Dropout(p=0.1), before bin and tri only
            self.bin_layer = Linear(config.hidden_size, 2)
            self.tri_layer = Linear(config.hidden_size, 3)
            self.reg_layer = Linear(config.hidden_size, 1)
            heads = nn.ModuleList([self.mlm_head, self.bin_layer, self.tri_layer, self.reg_layer])
            init_weights(heads, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, mlm: bool = False,
        output_hidden_states: bool = False, output_attentions: bool = False, unpad: bool = False,
        head_mask: Tensor | None = None, host: HostBatch | None = None,
    ) -> AlignOutput:
        """Heads on the pooled first token; the MLM head (every token) only with mlm=True. Without it
        the last layer runs for the first tokens alone (Encoder.forward final_tokens="first"), and
        last_hidden_state is (B, 1, C). unpad, host: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, final_tokens="all" if mlm else "first", head_mask=head_mask, host=host)
        pooled = out.pooler_output
        return AlignOutput(
            tri_label_logits=self.tri_layer(self.dropout(pooled)),
            seq_relationship_logits=self.bin_layer(self.dropout(pooled)),
            reg_label_logits=self.reg_layer(pooled),
            prediction_logits=self.mlm_head(out.last_hidden_state, self.encoder.embeddings.word.weight) if mlm else None,
            last_hidden_state=out.last_hidden_state,
            pooler_output=pooled,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )


@dataclass
class ClassifierOutput:
    logits: Tensor  # (B, num_labels)
    last_hidden_state: Tensor | None = None  # (B, 1, C): the first tokens, unless states are asked for
    pooler_output: Tensor | None = None  # where the family's classifier keeps the pooler (BERT)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class ClassifierModel(_OnEncoder, Pretrained):
    """<Family>ForSequenceClassification: an Encoder (with a pooler where the family's head reads it) and the
    sequence-classification head the family declares (Family.heads, heads.py)."""

    checkpoint_prefix = ""
    initialisable = ("classifier",)
    architecture = "ForSequenceClassification"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        pooler = family_of(config).heads(config).sequence_classification.uses_pooler
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=pooler)), "classifier")

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        config = _two_labels(config)
        kind = family_of(config).heads(config).sequence_classification
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=kind.uses_pooler)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.classifier = SequenceClassificationHead(config, kind)
            init_weights(self.classifier, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None, host: HostBatch | None = None,
    ) -> ClassifierOutput:
        """Logits on the first token, the last layer running for it alone (Encoder final_tokens="first"); a
        head that pools every token (SequenceClassification.tokens "all") gets them and the mask."""
        tokens = self.classifier.kind.tokens
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, final_tokens=tokens, head_mask=head_mask, host=host)
        keep = attention_mask
        # transformers reads the last token that is not pad_token_id (a config that saved none: the last real one)
        if self.classifier.kind.pool == "last" and getattr(self.config, "last_token_by_pad", True):
            keep = input_ids != self.config.pad_token_id
            keep = keep if attention_mask is None else keep & attention_mask.bool()
        logits = self.classifier(out, keep)
        return ClassifierOutput(logits, out.last_hidden_state, out.pooler_output, out.hidden_states, out.attentions)



@dataclass
class MaskedLMOutput:
    logits: Tensor  # (B, L, V)
    last_hidden_state: Tensor | None = None  # (B, L, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class MaskedLMModel(_OnEncoder, Pretrained):
    """<Family>ForMaskedLM: an Encoder (no pooler) and the masked-LM head the family declares (Family.heads,
    heads.py MaskedLM), its decoder the word embeddings unless the config unties it (a checkpoint whose decoder
    equals the word embeddings, or lacks it, loads tied: loading/checkpoints.py)."""

    checkpoint_prefix = ""
    initialisable = ("mlm_head",)
    hf_layout = "hf_head"  # save_pretrained(layout="hf"): transformers' *ForMaskedLM, AutoModelForMaskedLM's
    architecture = "ForMaskedLM"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=False)), "mlm_head")

    @classmethod
    def checkpoint_names(cls, config: Config) -> dict[str, str]:
        """ModernBERT's dense and norm sit among a checkpoint's names as the classifier's (heads.py MaskedLM.at)."""
        at = family_of(config).heads(config).masked_lm.at
        return {} if at == "mlm_head" else {f"mlm_head.{part}": f"{at}.{part}" for part in ("dense", "norm")}

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=False)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.mlm_head = MLMHead(config, family_of(config).heads(config).masked_lm)
            init_weights(self.mlm_head, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None, host: HostBatch | None = None,
    ) -> MaskedLMOutput:
        """Every token's logits (B, L, V); pad rows are the head applied to zero states. unpad, host: see Encoder.forward.
        A product that needs the logits of real tokens only, or a few at a time, calls `mlm_head.features` and
        `mlm_head.decode` on the states it picks (products/sparse.py)."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, head_mask=head_mask, host=host)
        logits = self.mlm_head(out.last_hidden_state, self.encoder.embeddings.word.weight)
        return MaskedLMOutput(logits, out.last_hidden_state, out.hidden_states, out.attentions)


@dataclass
class TokenClassifierOutput:
    logits: Tensor  # (B, L, num_labels); pad positions hold the head applied to zero states
    last_hidden_state: Tensor | None = None  # (B, L, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class TokenClassifierModel(_OnEncoder, Pretrained):
    """<Family>ForTokenClassification: an Encoder (no pooler) and the token-classification head the family declares
    (Family.heads, heads.py TokenClassification): one row of logits per token. Which class a
    checkpoint is for comes from its config.json's `architectures` (models/auto.py): BERT's token head and its
    sequence head have the same names."""

    checkpoint_prefix = ""
    initialisable = ("classifier",)
    hf_layout = "hf_head"  # save_pretrained(layout="hf"): transformers' *ForTokenClassification
    architecture = "ForTokenClassification"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=False)), "classifier")

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        self.config = config = _two_labels(config)
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=False)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.classifier = TokenHead(config, family_of(config).heads(config).token_classification, len(config.labels))
            init_weights(self.classifier, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None, host: HostBatch | None = None,
        final_tokens: str | Tensor = "all",
    ) -> TokenClassifierOutput:
        """Every token's logits (B, L, num_labels). final_tokens: "all", or a (B, L) bool mask of the tokens whose
        labels are read (Encoder.forward: packed, the last layer runs for them alone): the head runs on them
        alone, the others' logits zero. unpad, host: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, head_mask=head_mask, host=host, final_tokens=final_tokens)
        states = out.last_hidden_state
        if isinstance(final_tokens, Tensor) and states.device.type == "cpu" and not torch.compiler.is_compiling():
            picked = self.classifier(states[final_tokens])  # (Tq, num_labels): the wanted rows alone
            logits = picked.new_zeros(*states.shape[:2], picked.size(-1)).index_put_((final_tokens,), picked)
        elif isinstance(final_tokens, Tensor):  # on a device: every row, no host sync, no dynamic shape
            logits = self.classifier(states).masked_fill(~final_tokens[..., None], 0.0)
        else:
            logits = self.classifier(states)
        return TokenClassifierOutput(logits, states, out.hidden_states, out.attentions)


@dataclass
class QuestionAnsweringOutput:
    start_logits: Tensor  # (B, L): each token's score as the answer's first token
    end_logits: Tensor  # (B, L): as its last token
    last_hidden_state: Tensor | None = None  # (B, L, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class QuestionAnsweringModel(_OnEncoder, Pretrained):
    """<Family>ForQuestionAnswering (extractive QA): an Encoder (no pooler) and the head the family declares
    (Family.heads, heads.py QuestionAnswering): two logits per token, split into start and end
    (BertForQuestionAnswering.forward: logits.split(1, dim=-1))."""

    checkpoint_prefix = ""
    initialisable = ("qa_outputs",)
    hf_layout = "hf_head"  # save_pretrained(layout="hf"): transformers' *ForQuestionAnswering
    architecture = "ForQuestionAnswering"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=False)), "qa_outputs")

    @classmethod
    def checkpoint_names(cls, config: Config) -> dict[str, str]:
        """ModernBERT's head sits among a checkpoint's names as the classifier's (heads.py QuestionAnswering.at)."""
        at = _question_answering(config).at
        return {} if at == "qa_outputs" else {"qa_outputs": at}

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        config = _two_labels(config)
        if len(config.labels) != 2:
            raise ValueError(f"a question-answering head has two outputs (start, end logits): num_labels 2, got "
                             f"{len(config.labels)} labels {config.labels!r}")
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=False)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.qa_outputs = TokenHead(config, _question_answering(config), 2)
            init_weights(self.qa_outputs, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None, host: HostBatch | None = None,
    ) -> QuestionAnsweringOutput:
        """Every token's start and end logits, (B, L) each. unpad, host: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, head_mask=head_mask, host=host)
        logits = self.qa_outputs(out.last_hidden_state)  # (B, L, 2)
        start, end = logits.unbind(dim=-1)
        return QuestionAnsweringOutput(start.contiguous(), end.contiguous(), out.last_hidden_state, out.hidden_states,
                                       out.attentions)
