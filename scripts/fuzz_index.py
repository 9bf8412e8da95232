"""Fuzz the index reader with damaged files and bad arguments in child processes; prints a table
of outcomes per interface and any crash or hang (see draftscope.bench.fuzz).

    python scripts/fuzz_index.py --files 10000
"""

from draftscope.bench.fuzz import main

if __name__ == "__main__":
    raise SystemExit(main())
