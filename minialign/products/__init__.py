"""What users run: AlignScore and MiniCheck scorers, sentence embeddings, classifiers and rerankers, losses.
May import: nn, loading, models, text, runtime."""
