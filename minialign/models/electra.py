"""ELECTRA, as BERT but for what differs (transformers models/electra/modeling_electra.py): the
embeddings are `embedding_size` wide (ElectraEmbeddings: LayerNorm(word + position + token_type) ->
dropout, at that width), and ElectraModel projects them to hidden_size (`embeddings_project`, a
Linear that exists only when the two differ) before BERT's layers; no pooler; the classification
head reads the first token: out_proj(dropout(gelu(dense(dropout(h_0))))), exact GELU whatever
hidden_act says. Its config.json and weight names: convert/families/electra.py.

The masked-LM head is the generator's (ElectraForMaskedLM: generator_predictions, generator_lm_head), its
dense layer mapping onto embedding_size (Electra.masked_lm); converting drops the discriminator's
replaced-token head, which no minialign model has. No AlignScore model (its MLM head is hidden_size wide).

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), E embedding
size, C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from minialign.convert.families import electra as electra_format
from minialign.models.bert import Bert, BertConfig, Embeddings
from minialign.models.heads import Heads, MaskedLM, SequenceClassification, head_dropout
from minialign.nn.capture import record
from minialign.nn.config import POSITIVE_INT, Config, checked, optional
from minialign.nn.linear import Linear


@dataclass(frozen=True)
class ElectraConfig(BertConfig):
    """ELECTRA's config: BERT's fields and the embeddings' width (None: hidden_size, no projection)."""

    format = electra_format.FORMAT
    arch: str = "electra"
    embedding_size: int | None = checked(optional(POSITIVE_INT), None)

    @property
    def embedding_width(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size


class ElectraEmbeddings(Embeddings):
    """BERT's embeddings at embedding_size, then `project` to hidden_size where the two differ
    (ElectraEmbeddings, and ElectraModel.embeddings_project; the projection follows the dropout)."""

    def __init__(self, config: Config):
        super().__init__(config)
        width = self.width(config)
        self.project = Linear(width, config.hidden_size) if width != config.hidden_size else None

    @staticmethod
    def width(config: Config) -> int:
        return config.embedding_width

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """(B, L) each, or a packed (1, T) -> (B, L, C)."""
        x = super().forward(input_ids, token_type_ids, position_ids)  # (B, L, E)
        if self.project is not None:
            x = self.project(x)  # (B, L, C)
            x = record("project", x)
        return x


class Electra(Bert):
    config_class = ElectraConfig
    Embeddings = ElectraEmbeddings
    pooler = False  # ElectraModel has none

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """ElectraClassificationHead on the first token: out_proj(dropout(gelu(dense(dropout(h_0))))), its
        get_activation("gelu") whatever hidden_act says, no pooler; ElectraForMaskedLM (the generator):
        generator_lm_head(LayerNorm(gelu(dense(h)))), the dense layer mapping onto embedding_size
        (ElectraGeneratorPredictions, get_activation("gelu") whatever hidden_act says); the token and QA heads
        BERT's."""
        return Heads(sequence_classification=SequenceClassification(pool="first", dropout_in=head_dropout(config).p,
                                                                    dense_activation="gelu"),
                     masked_lm=MaskedLM(activation="gelu", width="embedding"))
