"""Text before the model: the tokenizer (+ pad), the sentence splitter, input checks. Imports nothing of minialign."""
