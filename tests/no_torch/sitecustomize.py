"""Put on PYTHONPATH, this hides torch from the interpreter as if it were not installed (issue 67: a
CPU machine installs none): ``import torch`` fails and ``importlib.util.find_spec("torch")`` is None.

Where ``DRAFTSCOPE_TORCH_TRIES`` names a file, every ``import torch`` Draftscope's own code tries (an
import statement or ``import_module``, not a ``find_spec`` question such as optional_torch's) is written
there once with the line that tried it, and at exit any torch module found in sys.modules: code that
catches the ImportError and carries on is caught too. A library's own guarded try (transformers asks
for torch that way) is its business, not the default path's."""

import atexit
import os
import sys

TRIES = os.environ.get("DRAFTSCOPE_TORCH_TRIES")
OURS = os.sep + "draftscope" + os.sep  # the package's files (app/draftscope/...)
_noted = set()


def _is_torch(name):
    return name == "torch" or name.startswith("torch.")


def _importer():
    """The line of the import that asked (the first frame outside importlib), or None for a
    ``find_spec`` question (no import under way)."""
    frame, importing = sys._getframe(2), False
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_find_and_load_unlocked":
            importing = True
        elif importing and not code.co_filename.startswith("<frozen importlib") and code.co_filename != __file__:
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _note(line):
    if line in _noted:  # each finder on sys.meta_path is asked in turn
        return
    _noted.add(line)
    with open(TRIES, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class _Hidden:
    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if _is_torch(name):
            where = _importer() if TRIES else None
            if where is not None and OURS in where:
                _note(f"import {name} tried at {where}")
            return None
        return self.inner.find_spec(name, path, target) if hasattr(self.inner, "find_spec") else None

    def __getattr__(self, item):
        return getattr(self.inner, item)


def _loaded_at_exit():
    for name in sorted(n for n in sys.modules if _is_torch(n)):
        _note(f"{name} in sys.modules at exit")


sys.meta_path[:] = [_Hidden(finder) for finder in sys.meta_path]
if TRIES:
    atexit.register(_loaded_at_exit)
