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

import functools
import importlib
import warnings

# torch warns "Failed to initialize NumPy: No module named 'numpy'" as it is imported without numpy, which
# minialign neither needs nor depends on. The warning is raised inside `import torch`, which the first read of a
# name below (or any command that runs) does: a filter set later, in cli.main, could come too late, since both entry
# points (the `minialign` script and `python -m minialign`) import this package first. It matches that message only,
# so a numpy that is installed but broken still warns. The one global this import sets.
warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy: No module named 'numpy'",
                        category=UserWarning)

from minialign import moved  # noqa: E402  (old module paths)

# Each public name and the module it comes from, imported when a name is first read (PEP 562), so that importing
# the package (the command line's parser, `minialign --help`) imports no torch. The names of _MODULES are their
# homes themselves.
_HOMES = {
    "CheckpointError": "minialign.convert",
    "analysis": "minialign.nn.analysis",
    "masks": "minialign.nn.masks",
    "attention": "minialign.nn.attention",
    "attention_bias": "minialign.nn.attention",
    **dict.fromkeys(["Capture", "ablate_heads", "ablate_mean", "capture", "patch", "replace_with"],
                    "minialign.nn.capture"),
    "PRESETS": "minialign.nn.config",
    "Config": "minialign.nn.config",
    "SCORE_FUNCTIONS": "minialign.nn.score_functions",
    **dict.fromkeys(["AlignModel", "AlignOutput", "ClassifierModel", "ClassifierOutput", "Encoder", "EncoderOutput",
                     "MaskedLMModel", "MaskedLMOutput", "QuestionAnsweringModel", "QuestionAnsweringOutput",
                     "TokenClassifierModel", "TokenClassifierOutput"], "minialign.models"),
    "split_sentences": "minialign.text.sentences",
    "Tokenizer": "minialign.text.tokenizer",
    "BatchEngine": "minialign.runtime.engine",
    "AlignScorer": "minialign.products.alignscore",
    "Classifier": "minialign.products.classifier",
    "SentenceEncoder": "minialign.products.embeddings",
    "FillMask": "minialign.products.fill_mask",
    "M3Encoder": "minialign.products.m3",
    **dict.fromkeys(["AlignLosses", "alignscore_losses", "classification_loss"], "minialign.products.losses"),
    "MiniCheckScorer": "minialign.products.minicheck",
    **dict.fromkeys(["quantize_embeddings", "truncate_embeddings"], "minialign.products.quantization"),
    "MultiVectorEncoder": "minialign.products.multivector",
    "SparseEncoder": "minialign.products.sparse",
    "QuestionAnswerer": "minialign.products.question_answering",
    "TokenClassifier": "minialign.products.token_classification",
    "ZeroShotClassifier": "minialign.products.zero_shot",
    **dict.fromkeys(["Exploration", "explore", "with_score_function"], "minialign.apps.explore"),
}
_MODULES = ("analysis", "masks")

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



@functools.cache
def _load() -> None:
    """Every home of a public name, in _HOMES' order: the first name read imports what the package once imported at
    its own import, so the families are registered (minialign.models imports them: Config and PRESETS know every
    one) and each home is an attribute of its folder (ma.nn.config, ma.products.minicheck)."""
    for home in dict.fromkeys(_HOMES.values()):
        importlib.import_module(home)


def __getattr__(name: str):
    """A public name (_HOMES), imported on first use; `minialign.scorer` and the other old module names (moved.py)."""
    if name not in _HOMES:
        return moved.attribute(name)
    _load()
    module = importlib.import_module(_HOMES[name])
    return module if name in _MODULES else getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


moved.keep_public_names([name for name in _HOMES if name not in _MODULES])
