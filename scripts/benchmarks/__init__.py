"""The benchmark's pieces, run by scripts/bench.py: machine.py (the machine and the timer), corpus.py
(seeded texts), fixtures.py (models made by code), report.py and report.md (the report's prose and
tables), and one module per section (kernels, encoder, families, scoring, loading_memory, embeddings,
precision, service, workers, parity). Tools beside the package: nothing here is installed."""
