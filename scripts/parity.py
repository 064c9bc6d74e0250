"""Compare minialign with transformers on any checkpoint; exits non-zero above the tolerance.

    python scripts/parity.py SRC [--backbone B] [--tolerance 1e-4]

SRC: an HF dir or hub id, a minialign dir, or an AlignScore .ckpt. Same as `minialign parity`.
"""

import sys

from minialign.apps.cli import main

if __name__ == "__main__":
    sys.exit(main(["parity", *sys.argv[1:]]))
