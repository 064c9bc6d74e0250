"""File commands: rows in (JSONL, CSV), results out, resume (rows.py); the score, embed and classify jobs (jobs.py)."""
