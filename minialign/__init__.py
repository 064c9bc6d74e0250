"""minialign: a hand-written PyTorch BERT/RoBERTa encoder and AlignScore's alignment model."""

import warnings

# torch warns "Failed to initialize NumPy: No module named 'numpy'" as it is imported without numpy, which
# minialign neither needs nor depends on. The warning is raised inside `import torch`, and this package's
# first import (convert, below) imports torch: a filter set later, in cli.main, would come too late, since
# both entry points (the `minialign` script and `python -m minialign`) import this package first. It matches
# that message only, so a numpy that is installed but broken still warns. The one global this import sets.
warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy: No module named 'numpy'",
                        category=UserWarning)

from .convert import CheckpointError

from . import masks
from .attention import attention, attention_bias
from .tracing import Capture, capture
from .config import PRESETS, Config
from .batching import BatchEngine
from .classifier import Classifier
from .explore import Exploration, explore
from .embedding import SentenceEncoder
from .minicheck import MiniCheckScorer
from .losses import AlignLosses, alignscore_losses, classification_loss
from .model import AlignModel, AlignOutput, ClassifierModel, ClassifierOutput, Encoder, EncoderOutput
from .scorer import AlignScorer
from .scores import SCORE_FUNCTIONS
from .sentences import split_sentences
from .tokenizer import Tokenizer

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "SCORE_FUNCTIONS",
    "AlignLosses",
    "Capture",
    "AlignModel",
    "AlignOutput",
    "AlignScorer",
    "BatchEngine",
    "CheckpointError",
    "Classifier",
    "Exploration",
    "ClassifierModel",
    "ClassifierOutput",
    "Config",
    "Encoder",
    "MiniCheckScorer",
    "SentenceEncoder",
    "EncoderOutput",
    "Tokenizer",
    "alignscore_losses",
    "classification_loss",
    "attention",
    "attention_bias",
    "capture",
    "masks",
    "explore",
    "split_sentences",
]
