"""Benchmark minialign against transformers and the original AlignScore pipeline, in one process.

    python scripts/bench.py [--quick] [--out BENCHMARKS.md]

Same as `minialign bench`. Needs the `test` extra (transformers).
"""

import sys

from minialign.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
