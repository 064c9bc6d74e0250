"""How many shards a Ray Data run cuts its input into, unless told (raydata.choose_shards), declared without torch:
the command line's --shards help reads it before anything loads."""

# Shards, unless told: one per SHARD_ROWS rows, at least 1, at most MAX_SHARDS. A shard is what a rerun
# resumes by, and each costs a pass over the whole input (a filter picks its rows) and its own actors' start
# (a Ray worker, the model's load: 10-15 s on one machine; at c17d48c, 2026-11-23, when shards came to follow
# the row count: 100 rows took 131 s in 16 shards, 24 s in one). 10,000 rows are hours of AlignScore per core
# and minutes of MiniLM embeddings, so that fixed cost stays small while an interrupted run loses at most a
# shard; the cap bounds the passes over the input.
SHARD_ROWS = 10_000
MAX_SHARDS = 16
