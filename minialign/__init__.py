"""minialign: hand-written PyTorch encoders (BERT, RoBERTa, XLM-R, ELECTRA, DistilBERT, MPNet, DeBERTa-v2, ModernBERT)
and AlignScore's alignment model.

The package is in folders by layer; each may import only the folders below it (tests/test_package.py
holds them to it):

    nn/        the encoder's parts: config, attention and its backends, layers, layout, capture   -> torch, convert
    sources/   where files come from: a local path or a hub snapshot                          -> convert
    loading/   checkpoints -> models: read, build, export, the Pretrained base                -> nn, sources, text, convert
    models/    the model classes: Encoder and its families, AlignModel, ClassifierModel         -> nn, loading
    text/      tokenizer (+ pad), sentence splitting, input checks                             -> sources
    runtime/   the batching engine, the process pool, the service's request queue              -> text
    products/  runners (AlignScore, MiniCheck, embeddings, sparse, classifiers) and losses             -> all of the above
    apps/      command line, HTTP service, Ray Data, file jobs, explore, parity                -> anything; nothing imports apps
    convert/   foreign names and formats (installed as minialign.convert)                      -> nothing of minialign
"""

import warnings

# torch warns "Failed to initialize NumPy: No module named 'numpy'" as it is imported without numpy, which
# minialign neither needs nor depends on. The warning is raised inside `import torch`, and this package's
# first import (convert, below) imports torch: a filter set later, in cli.main, would come too late, since
# both entry points (the `minialign` script and `python -m minialign`) import this package first. It matches
# that message only, so a numpy that is installed but broken still warns. The one global this import sets.
warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy: No module named 'numpy'",
                        category=UserWarning)

from minialign import moved  # noqa: E402  (old module paths, before the names below import them)
from minialign.convert import CheckpointError  # noqa: E402
from minialign.nn import analysis, masks  # noqa: E402
from minialign.nn.attention import attention, attention_bias  # noqa: E402
from minialign.nn.capture import Capture, ablate_heads, ablate_mean, capture, patch, replace_with  # noqa: E402
from minialign.nn.config import PRESETS, Config  # noqa: E402
from minialign.nn.score_functions import SCORE_FUNCTIONS  # noqa: E402
from minialign.models import (AlignModel, AlignOutput, ClassifierModel, ClassifierOutput, Encoder,  # noqa: E402
                              EncoderOutput, MaskedLMModel, MaskedLMOutput, QuestionAnsweringModel,
                              QuestionAnsweringOutput, TokenClassifierModel, TokenClassifierOutput)
from minialign.text.sentences import split_sentences  # noqa: E402
from minialign.text.tokenizer import Tokenizer  # noqa: E402
from minialign.runtime.engine import BatchEngine  # noqa: E402
from minialign.products.alignscore import AlignScorer  # noqa: E402
from minialign.products.classifier import Classifier  # noqa: E402
from minialign.products.embeddings import SentenceEncoder  # noqa: E402
from minialign.products.fill_mask import FillMask  # noqa: E402
from minialign.products.m3 import M3Encoder  # noqa: E402
from minialign.products.losses import AlignLosses, alignscore_losses, classification_loss  # noqa: E402
from minialign.products.minicheck import MiniCheckScorer  # noqa: E402
from minialign.products.quantization import quantize_embeddings, truncate_embeddings  # noqa: E402
from minialign.products.multivector import MultiVectorEncoder  # noqa: E402
from minialign.products.sparse import SparseEncoder  # noqa: E402
from minialign.products.question_answering import QuestionAnswerer  # noqa: E402
from minialign.products.token_classification import TokenClassifier  # noqa: E402
from minialign.products.zero_shot import ZeroShotClassifier  # noqa: E402
from minialign.apps.explore import Exploration, explore, with_score_function  # noqa: E402

__version__ = "0.2.0"

__all__ = [
    "PRESETS",
    "SCORE_FUNCTIONS",
    "AlignLosses",
    "AlignModel",
    "AlignOutput",
    "AlignScorer",
    "BatchEngine",
    "Capture",
    "CheckpointError",
    "Classifier",
    "ClassifierModel",
    "ClassifierOutput",
    "Config",
    "Encoder",
    "EncoderOutput",
    "Exploration",
    "FillMask",
    "M3Encoder",
    "MaskedLMModel",
    "MaskedLMOutput",
    "MiniCheckScorer",
    "MultiVectorEncoder",
    "QuestionAnswerer",
    "QuestionAnsweringModel",
    "QuestionAnsweringOutput",
    "SentenceEncoder",
    "SparseEncoder",
    "TokenClassifier",
    "TokenClassifierModel",
    "TokenClassifierOutput",
    "Tokenizer",
    "ZeroShotClassifier",
    "ablate_heads",
    "ablate_mean",
    "alignscore_losses",
    "analysis",
    "attention",
    "attention_bias",
    "capture",
    "classification_loss",
    "explore",
    "masks",
    "patch",
    "quantize_embeddings",
    "replace_with",
    "split_sentences",
    "truncate_embeddings",
    "with_score_function",
]


def __getattr__(name: str):
    """`minialign.scorer` and the other old module names, as attributes (moved.py)."""
    return moved.attribute(name)


moved.keep_public_names(globals())
