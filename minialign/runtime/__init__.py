"""Running models on inputs: the batching engine (+ the truncation report), the process pool, the
service's request queue, memory release. May import: text. Models come in as forward callables."""
