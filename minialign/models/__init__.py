"""The model classes: the Encoder and the models with heads on it (encoder.py: AlignModel, ClassifierModel,
MaskedLMModel), over one file per
encoder family (family.py declares the seam; bert.py, roberta.py, ...). Every module of this package
is imported here, so a family file registers itself (its config class and Family) by being present.
May import: nn, loading, convert."""

import importlib
import pkgutil

from minialign.models.bert import Bert, BertConfig, ClassificationHead, Embeddings
from minialign.models.encoder import (AlignModel, AlignOutput, ClassifierModel, ClassifierOutput, Encoder,
                                      EncoderOutput, MaskedLMModel, MaskedLMOutput, MLMHead, QuestionAnsweringModel,
                                      QuestionAnsweringOutput, TokenClassifierModel, TokenClassifierOutput)
from minialign.models.family import FAMILIES, Family, family_of
from minialign.models.roberta import (Roberta, RobertaClassificationHead, RobertaConfig, RobertaEmbeddings,
                                      roberta_position_ids)
from minialign.nn.init import init_parameter, init_weights
from minialign.nn.layers import EncoderLayer, FeedForward, Pooler, SelfAttention

for _module in pkgutil.iter_modules(__path__):  # the family files: each registers its family
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["FAMILIES", "AlignModel", "AlignOutput", "Bert", "BertConfig", "ClassificationHead", "ClassifierModel",
           "ClassifierOutput", "Embeddings", "Encoder", "EncoderLayer", "EncoderOutput", "Family", "FeedForward",
           "MLMHead", "MaskedLMModel", "MaskedLMOutput", "Pooler", "QuestionAnsweringModel", "QuestionAnsweringOutput", "Roberta", "RobertaClassificationHead", "RobertaConfig", "RobertaEmbeddings",
           "SelfAttention", "TokenClassifierModel", "TokenClassifierOutput", "family_of", "init_parameter", "init_weights", "roberta_position_ids"]


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
