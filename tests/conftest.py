import pytest

from draftscope.retrieval import Reader, Writer


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
