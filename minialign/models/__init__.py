"""The model classes: the Encoder (BERT, RoBERTa) and the models with heads on it. May import: nn, loading."""

from minialign.models.encoder import (AlignModel, AlignOutput, ClassificationHead, ClassifierModel, ClassifierOutput,
                                      Embeddings, Encoder, EncoderLayer, EncoderOutput, FeedForward, MLMHead, Pooler,
                                      SelfAttention)
from minialign.nn.init import init_parameter, init_weights

__all__ = ["AlignModel", "AlignOutput", "ClassificationHead", "ClassifierModel", "ClassifierOutput", "Embeddings",
           "Encoder", "EncoderLayer", "EncoderOutput", "FeedForward", "MLMHead", "Pooler", "SelfAttention",
           "init_parameter", "init_weights"]
