"""The model classes: the Encoder and the models with heads on it (encoder.py), over one file per
encoder family (family.py declares the seam; bert.py, roberta.py). May import: nn, loading, convert."""

from minialign.models.bert import Bert, ClassificationHead, Embeddings
from minialign.models.deberta_v2 import DebertaV2  # noqa: F401  (registers the family)
from minialign.models.distilbert import DistilBert  # noqa: F401  (registers the family)
from minialign.models.electra import Electra  # noqa: F401  (registers the family)
from minialign.models.encoder import (AlignModel, AlignOutput, ClassifierModel, ClassifierOutput, Encoder,
                                      EncoderOutput, MLMHead)
from minialign.models.family import FAMILIES, Family, family_of
from minialign.models.mpnet import MPNet  # noqa: F401  (registers the family)
from minialign.models.modernbert import ModernBert  # noqa: F401  (registers the family)
from minialign.models.roberta import Roberta, RobertaClassificationHead, RobertaEmbeddings, roberta_position_ids
from minialign.models.xlm_roberta import Camembert, XLMRoberta  # noqa: F401  (registers the families)
from minialign.nn.init import init_parameter, init_weights
from minialign.nn.layers import EncoderLayer, FeedForward, Pooler, SelfAttention

__all__ = ["FAMILIES", "AlignModel", "AlignOutput", "Bert", "ClassificationHead", "ClassifierModel",
           "ClassifierOutput", "Embeddings", "Encoder", "EncoderLayer", "EncoderOutput", "Family", "FeedForward",
           "MLMHead", "Pooler", "Roberta", "RobertaClassificationHead", "RobertaEmbeddings", "SelfAttention",
           "family_of", "init_parameter", "init_weights", "roberta_position_ids"]
