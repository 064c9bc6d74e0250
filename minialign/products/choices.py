"""The products' names and defaults that a face offers before any model loads, declared without torch: the command
line builds its parser from them (apps/products.py), and each product module imports its own from here (the one
declaration; a runner's signature names them)."""

# AlignScore (alignscore.py: MODES, DEFAULT_MODE, DEFAULT_MODEL)
ALIGNSCORE_MODES = ("nli_sp", "bin_sp", "reg_sp", "nli", "bin", "reg")
ALIGNSCORE_MODE = "nli_sp"
ALIGNSCORE_MODEL = "AlignScore-base"  # a name of alignscore.PUBLISHED

# MiniCheck (minicheck.py: DEFAULT_MODEL, CHUNK_SIZE)
MINICHECK_MODEL = "lytang/MiniCheck-RoBERTa-Large"
MINICHECK_CHUNK_SIZE = 400  # MiniCheck.score's default for roberta-large and deberta-v3-large
MINICHECK_T5_CHUNK_WORDS = 500  # MiniCheck._score_inferencer's default for flan-t5-large: words, not tokens

# FactCG (factcg.py: DEFAULT_MODEL, CHUNK_WORDS)
FACTCG_MODEL = "yaxili96/FactCG-DeBERTa-v3-Large"
FACTCG_CHUNK_WORDS = 550  # derenlei/FactCG Inferencer.chunking_src's max_chunk_size: words, not tokens

# HHEM (hhem.py: DEFAULT_MODEL)
HHEM_MODEL = "vectara/hallucination_evaluation_model"

# HallucinationDetector (lettuce.py): lettucedetect's TransformerDetector (detectors/transformer.py)
LETTUCE_OUTPUT_FORMATS = ("tokens", "spans")  # TransformerDetector.predict's output_format
LETTUCE_OUTPUT_FORMAT = "tokens"  # its default (the file / service face writes "spans" unless told)
LETTUCE_LANGS = ("en", "de", "fr", "es", "it", "pl", "cn", "hu")  # detectors/prompt_utils.py LANG_TO_PASSAGE
LETTUCE_LANG = "en"  # TransformerDetector.__init__'s lang
LETTUCE_MAX_LENGTH = 4096  # TransformerDetector.__init__'s max_length

# Classifier.predict's activations (classifier.py: ACTIVATIONS; nn/activations.py's functions)
CLASSIFIER_ACTIVATIONS = ("auto", "none", "softmax", "sigmoid", "tanh")

# TokenClassifier (token_classification.py: AGGREGATIONS): transformers' AggregationStrategy values
AGGREGATIONS = ("none", "simple", "first", "average", "max")
NER_AGGREGATION = "none"  # predict's aggregation_strategy, as TokenClassificationPipeline's default

# FillMask.predict's top_k: candidates per mask, as FillMaskPipeline's default
FILL_MASK_TOP_K = 5

# QuestionAnswerer (question_answering.py: MAX_ANSWER_LEN, MAX_QUESTION_LEN)
QA_MAX_ANSWER_LEN = 15  # postprocess's default
QA_MAX_QUESTION_LEN = 64  # preprocess's default (used by v4's slow tokenizers only)

# ZeroShotClassifier (zero_shot.py: DEFAULT_TEMPLATE): ZeroShotClassificationPipeline.preprocess's hypothesis_template
ZERO_SHOT_TEMPLATE = "This example is {}."

# quantization.py: PRECISIONS, what SentenceEncoder.encode's precision takes
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")

# encode_query / encode_document: the embed, sparse and multi-vector jobs' task option (None: the model's default)
TASKS = ("query", "document")

# Per-call defaults the faces offer (the runner's signature, the product table and the file job read these)
CLASSIFIER_ACTIVATION = "auto"  # Classifier.predict's activation: the model's own (classifier.py Classifier.activation)
EMBED_NORMALIZE = False  # SentenceEncoder.encode's normalize_embeddings (the embed job's normalize)
M3_RETURN_DENSE = True  # M3Encoder.encode's outputs, as BGEM3FlagModel.encode's defaults
M3_RETURN_SPARSE = False
M3_RETURN_COLBERT_VECS = False
QA_TOP_K = 1  # QuestionAnswerer.predict's: one answer, its own dict (QuestionAnsweringPipeline's default)
QA_HANDLE_IMPOSSIBLE_ANSWER = False
QA_ALIGN_TO_WORDS = True
ZERO_SHOT_MULTI_LABEL = False  # ZeroShotClassifier.predict's: a softmax over the labels

# torch.compile's modes, a runner's `compile` by name (runner.py compile_mode; True is "default"), and those that
# replay CUDA graphs (the batching engine pads each batch's rows to a power of two for them: BatchEngine cuda_graphs)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
