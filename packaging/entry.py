"""PyInstaller entry point for the Draftscope bundle (packaging/draftscope.spec): the same as the
``draftscope`` console script, ``draftscope.cli:main``."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # `draftscope bench retriever` uses worker processes
    from draftscope.cli import main

    sys.exit(main())
