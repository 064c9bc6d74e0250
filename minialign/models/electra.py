"""ELECTRA, as BERT but for what differs (transformers models/electra/modeling_electra.py): the
embeddings are `embedding_size` wide (ElectraEmbeddings: LayerNorm(word + position + token_type) ->
dropout, at that width), and ElectraModel projects them to hidden_size (`embeddings_project`, a
Linear that exists only when the two differ) before BERT's layers; no pooler; the classification
head reads the first token: out_proj(dropout(gelu(dense(dropout(h_0))))), exact GELU whatever
hidden_act says. Its config.json and weight names: convert/families/electra.py.

No AlignScore or MLM model: ELECTRA's generator head (generator_predictions, generator_lm_head) is
embedding_size wide, unlike minialign's MLMHead; converting drops it, as it drops the
discriminator's replaced-token head.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), E embedding
size, C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from minialign.convert.families import electra as electra_format
from minialign.models.bert import Bert, BertConfig, Embeddings
from minialign.models.heads import SequenceClassification, head_dropout
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
    def sequence_classification(cls, config: Config) -> SequenceClassification:
        """ElectraClassificationHead on the first token: out_proj(dropout(gelu(dense(dropout(h_0))))), its
        get_activation("gelu") whatever hidden_act says; no pooler."""
        return SequenceClassification(pool="first", dropout_in=head_dropout(config).p, dense_activation="gelu")
