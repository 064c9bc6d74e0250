"""What users run: the runners under one contract (runner.py: load, tokenize + batch, forward, post-process,
truncation reported alike), AlignScore and MiniCheck scorers, sentence embeddings (every pooling mode in
pooling.py), multi-vector (ColBERT) token vectors (multivector.py; the directories it reads: colbert_dirs.py) and
MaxSim (maxsim.py), classifiers and rerankers;
token classifiers (token_classification.py: transformers' token-classification pipeline); masked-token prediction
(fill_mask.py: transformers' fill-mask pipeline); extractive question answering (question_answering.py: transformers
4's question-answering pipeline); zero-shot classification over an NLI model (zero_shot.py: transformers'
zero-shot-classification pipeline); losses.
May import: nn, sources, loading, models, text, runtime, convert."""


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
