"""A transformers 4.x pipeline in its own process, driven over stdin / stdout by benchmarks/heads.py: transformers 5
removed QuestionAnsweringPipeline, so the question-answering peer runs under a transformers 4.x environment (a
separate venv: `python -m venv tf4 && tf4/bin/pip install torch==2.13.0 'transformers<5'`), one call per request, in
the same interleaved rounds as minialign's calls in the parent.

    python transformers4_worker.py            (run by transformers4.Worker, with the 4.x environment's python)
    stdin:  {"task": "question-answering", "model": DIR}       one line: load the pipeline
            {"kwargs": {...}}                                    one line per call: pipe(**kwargs)
    stdout: {"ready": version} / {"output": ..., "seconds": s} / {"error": message}

Imports nothing of minialign (it is not installed there) and nothing beside this file.
"""

from __future__ import annotations

import json
import sys
import time


def plain(value):
    """numpy scalars and arrays as JSON's numbers and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value


def main() -> int:
    import warnings

    import transformers

    warnings.simplefilter("ignore")
    if int(transformers.__version__.split(".")[0]) >= 5:
        print(json.dumps({"error": f"needs transformers 4.x, found {transformers.__version__}"}), flush=True)
        return 1
    request = json.loads(sys.stdin.readline())
    pipe = transformers.pipeline(request["task"], model=request["model"], tokenizer=request["model"], device="cpu")
    print(json.dumps({"ready": transformers.__version__}), flush=True)
    for line in sys.stdin:
        kwargs = json.loads(line)["kwargs"]
        start = time.perf_counter()
        try:
            output = pipe(**kwargs)
        except Exception as error:  # the parent reports it
            print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
            continue
        print(json.dumps({"output": plain(output), "seconds": time.perf_counter() - start}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
