"""PyInstaller entry point for the Draftscope bundle (packaging/draftscope.spec): the same as the
``draftscope`` console script, ``draftscope.cli:main``.

The app starts children as ``sys.executable -m MODULE`` (the file reader,
draftscope.documents.child; llama.cpp's self-test and GGUF check). In a bundle ``sys.executable``
is this program, not Python, so ``-m MODULE ARGS`` is handled here as Python would."""

import multiprocessing
import runpy
import sys


def run_module_if_asked() -> bool:
    """``entry -m MODULE ARGS...``: run MODULE as ``__main__`` with ARGS, as ``python -m`` does."""
    if len(sys.argv) < 3 or sys.argv[1] != "-m":
        return False
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return True


if __name__ == "__main__":
    multiprocessing.freeze_support()  # `draftscope bench retriever` uses worker processes
    if not run_module_if_asked():
        from draftscope.cli import main

        sys.exit(main())
