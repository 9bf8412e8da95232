"""Put on PYTHONPATH, this hides torch from the interpreter as if it were not installed: ``import
torch`` fails and ``importlib.util.find_spec("torch")`` is None (a CPU install without torch)."""

import sys


class _Hidden:
    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return None
        return self.inner.find_spec(name, path, target) if hasattr(self.inner, "find_spec") else None

    def __getattr__(self, item):
        return getattr(self.inner, item)


sys.meta_path[:] = [_Hidden(finder) for finder in sys.meta_path]
