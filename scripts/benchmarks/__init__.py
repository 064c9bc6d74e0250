"""The benchmark's pieces, run by scripts/bench.py: machine.py (the machine and the CPU report's timer), corpus.py
(seeded texts), fixtures.py (models made by code), report.py and report.md (the CPU report's prose and
tables), and one module per section (kernels, encoder, families, scoring, loading_memory, embeddings,
precision, service, workers, parity, ...). The GPU suite's method (scripts/gpu_suite.sh, bench.py --suite):
timing.py (interleaved repetitions: median, spread, host, device and wall time), syncs.py (syncs, kernels and
compiles per call), offered.py (the new paths it runs where they exist), data.py (the one schema of a run's file,
docs/benchmarks/<machine>.json), render.py (BENCHMARKS.md and the docs' page generated from those files, with charts)
and convert_history.py (the past hand-written tables converted into that schema). Tools beside the package:
nothing here is installed."""
