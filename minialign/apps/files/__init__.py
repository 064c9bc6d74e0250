"""File commands: rows in (rows.py: JSONL, CSV, TSV, validated), the engine (run.py), results out and resume
(writer.py, settings.py, tensors.py), where a command may write (formats.py), each product's job (jobs.py)."""
