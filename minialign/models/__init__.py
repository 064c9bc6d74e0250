"""The model classes: the Encoder (encoder.py) and the models with heads on it (head_models.py: AlignModel,
ClassifierModel, MaskedLMModel, TokenClassifierModel, QuestionAnsweringModel; their heads: heads.py), over one
file per encoder family (family.py declares the seam; bert.py, roberta.py, ...). Every module of this package
is imported here, so a family file registers itself (its config class and Family) by being present.
May import: nn, loading, convert."""

import importlib
import pkgutil

from minialign.models.bert import Bert, BertConfig, Embeddings
from minialign.models.encoder import Encoder, EncoderOutput
from minialign.models.family import Family, family_of
from minialign.models.head_models import (AlignModel, AlignOutput, ClassifierModel, ClassifierOutput, MaskedLMModel,
                                          MaskedLMOutput, QuestionAnsweringModel, QuestionAnsweringOutput,
                                          TokenClassifierModel, TokenClassifierOutput)
from minialign.models.heads import MLMHead
from minialign.models.roberta import Roberta, RobertaConfig, RobertaEmbeddings, roberta_position_ids
from minialign.nn.init import init_parameter, init_weights
from minialign.nn.layers import EncoderLayer, FeedForward, Pooler, SelfAttention

for _module in pkgutil.iter_modules(__path__):  # the family files: each registers its family
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["AlignModel", "AlignOutput", "Bert", "BertConfig", "ClassifierModel", "ClassifierOutput", "Embeddings",
           "Encoder", "EncoderLayer", "EncoderOutput", "Family", "FeedForward", "MLMHead", "MaskedLMModel",
           "MaskedLMOutput", "Pooler", "QuestionAnsweringModel", "QuestionAnsweringOutput", "Roberta", "RobertaConfig",
           "RobertaEmbeddings", "SelfAttention", "TokenClassifierModel", "TokenClassifierOutput", "family_of",
           "init_parameter", "init_weights", "roberta_position_ids"]


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
