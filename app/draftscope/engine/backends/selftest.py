"""``python -m draftscope.engine.backends.selftest``: does the installed llama.cpp run on this CPU?

pip caches the wheel it builds, and llama.cpp builds for the CPU it is built on: a cache carried
to another CPU gives a library that dies of an illegal instruction at its first matrix product.
scripts/setup.sh runs this in a child process and rebuilds llama-cpp-python when it dies. Exit 0
and one line when a tiny random model verifies a small draft tree."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def main() -> int:
    from draftscope.engine.backends.base import chain_tree
    from draftscope.engine.backends.gguf_writer import random_llama
    from draftscope.engine.backends.llamacpp import LlamaCppBackend

    with tempfile.TemporaryDirectory(prefix="draftscope-selftest-") as tmp:
        path = random_llama(Path(tmp) / "selftest.gguf")
        backend = LlamaCppBackend(path, None, context=128, threads=1)
        try:
            backend.start([1, 2, 3, 4])
            rows = backend.verify(4, chain_tree([5, 6, 7])).logits
            backend.commit([0, 1])
        finally:
            backend.close()
    if rows.shape[0] != 4 or not bool(rows.isfinite().all()):
        print("llama.cpp ran but gave unusable logits")
        return 1
    import llama_cpp

    print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) runs on this CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
