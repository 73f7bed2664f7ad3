#!/usr/bin/env python3
"""Nightjar's benchmark (the entry point; the code is in bin/bench/):

    .venv/bin/python bin/benchmark.py [--quick] [--only SECTION ...] [--json FILE] [--processes N ...]

--help lists the sections. Importing this file starts nothing."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bin"):  # the project's packages, and bin/bench
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from bench.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
