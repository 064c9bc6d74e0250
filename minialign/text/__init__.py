"""Text before the model: the tokenizer (+ pad; files read from a resolved source), the sentence
splitter, input checks (validation). May import: sources."""
