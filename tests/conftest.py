import os

# Qt tests run without a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from draftscope.retrieval import Reader, Writer
from tokenizer_fixture import make_tokenizer_folder


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A folder holding a tiny trained BPE tokenizer with a ChatML chat template."""
    return make_tokenizer_folder(tmp_path_factory.mktemp("tiny-tokenizer"))


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


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
