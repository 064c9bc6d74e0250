"""Where model files come from: a local directory or file, or a Hugging Face hub snapshot (fetched once,
from the cache when offline). May import: convert."""
