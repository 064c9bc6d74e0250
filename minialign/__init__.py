"""minialign: a hand-written PyTorch BERT/RoBERTa encoder and AlignScore's alignment model."""

from convert import CheckpointError

from .attention import attention, attention_bias
from .config import PRESETS, Config
from .model import AlignModel, AlignOutput, Encoder, EncoderOutput
from .scorer import AlignScorer
from .sentences import split_sentences
from .tokenizer import Tokenizer

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AlignModel",
    "AlignOutput",
    "AlignScorer",
    "CheckpointError",
    "Config",
    "Encoder",
    "EncoderOutput",
    "Tokenizer",
    "attention",
    "attention_bias",
    "split_sentences",
]
