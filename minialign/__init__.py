"""minialign: hand-written PyTorch encoders (the families of minialign/models/, registered as they are imported:
nn/config.py families()) and AlignScore's alignment model.

The package is in folders by layer; each may import only the folders below it (tests/test_package.py
holds them to it):

    nn/        the encoder's parts: config, attention and its backends, layers, layout, capture   -> torch, convert
    sources/   where files come from: a local path or a hub snapshot                          -> convert
    loading/   checkpoints -> models: read, build, export, the Pretrained base                -> nn, sources, text, convert
    models/    the model classes: Encoder and its families, AlignModel, ClassifierModel         -> nn, loading
    text/      tokenizer (+ pad), sentence splitting, input checks                             -> sources
    runtime/   the batching engine, the process pool, the service's request queue, sync counts -> text, nn
    products/  runners (AlignScore, MiniCheck, embeddings, sparse, classifiers) and losses             -> all of the above
    apps/      command line, HTTP service, Ray Data, file jobs, explore, parity                -> anything; nothing imports apps
    convert/   foreign names and formats (installed as minialign.convert)                      -> nothing of minialign
"""

import importlib

# Each public name and the module it comes from, imported when a name is first read (PEP 562), so that importing
# the package (the command line's parser, `minialign --help`) imports no torch. The names of _MODULES are their
# homes themselves.
_HOMES = {
    "CheckpointError": "minialign.convert",
    "analysis": "minialign.nn.analysis",
    "cache": "minialign.nn.cache",
    "masks": "minialign.nn.masks",
    "attention": "minialign.nn.attention",
    "attention_bias": "minialign.nn.masks",
    **dict.fromkeys(["Capture", "capture", "patch"], "minialign.nn.capture"),
    **dict.fromkeys(["Site", "ablate_heads", "ablate_mean", "reconstruct", "replace_with", "steer"],
                    "minialign.nn.interventions"),
    **dict.fromkeys(["DirectAttribution", "direct_attribution"], "minialign.nn.attribution"),
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
    "StaticEncoder": "minialign.products.static",
    "FillMask": "minialign.products.fill_mask",
    "HallucinationDetector": "minialign.products.lettuce",
    "M3Encoder": "minialign.products.m3",
    **dict.fromkeys(["AlignLosses", "alignscore_losses", "classification_loss"], "minialign.products.losses"),
    "MiniCheckScorer": "minialign.products.minicheck",
    "HHEM": "minialign.products.hhem",
    "FactCGScorer": "minialign.products.factcg",
    **dict.fromkeys(["quantize_embeddings", "truncate_embeddings"], "minialign.products.quantization"),
    "MultiVectorEncoder": "minialign.products.multivector",
    "SparseEncoder": "minialign.products.sparse",
    **dict.fromkeys(["embedding_of", "pooled_cosine", "steering_vector", "text_inputs"], "minialign.products.probes"),
    "QuestionAnswerer": "minialign.products.question_answering",
    "TokenClassifier": "minialign.products.token_classification",
    "ZeroShotClassifier": "minialign.products.zero_shot",
    **dict.fromkeys(["Exploration", "explore"], "minialign.apps.explore"),
    "with_score_function": "minialign.nn.score_swap",
}
_MODULES = ("analysis", "cache", "masks")
_FOLDERS = ("nn", "sources", "loading", "models", "text", "runtime", "products", "apps", "convert")

__version__ = "0.3.0"

__all__ = sorted(_HOMES)


def submodule(package: str, name: str):
    """`package.name` read as an attribute before anything imported it (ma.nn.capture, ma.products.minicheck): that
    module, imported; each folder's __getattr__ (PEP 562) calls this. Nothing else is loaded here: `from
    minialign.nn import choices` asks the folder for the name before importing it, and the command line's parser
    must stay without torch."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{package}.{name}":
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None


def __getattr__(name: str):
    """A public name (_HOMES), imported on first use; a folder (ma.nn, ma.products)."""
    if name in _FOLDERS:
        return submodule(__name__, name)
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_HOMES[name])
    return module if name in _MODULES else getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

