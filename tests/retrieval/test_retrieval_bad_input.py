"""Bad input gets a clear error naming the problem, never a crash, and loses nothing."""

import struct
import zlib

import numpy as np
import pytest

from draftscope._retriever import FORMAT_VERSION
from draftscope.retrieval import IndexFormatError, NewerIndexVersionError, Reader, Writer


@pytest.mark.parametrize(
    "entry, position, message",
    [
        ([1, 2, 100], 2, "is 100, outside the vocabulary"),
        ([1, -1, 3], 1, "is -1, outside the vocabulary"),
        ([1, 2.5], 1, "is not an int: 2.5"),
        (["a", 1], 0, "is not an int: 'a'"),
        ([1, None], 1, "is not an int: None"),
        ([1, 2**70], 1, f"is {2**70}, outside the vocabulary"),
        (np.array([1.0, 2.0]), 0, "is not an int: 1.0"),
        (np.array([3, 2**63 + 5], dtype=np.uint64), 1, "outside the vocabulary"),
    ],
)
def test_bad_tokens_name_entry_and_position(tmp_path, entry, position, message):
    w = Writer(tmp_path / "x.idx", 100)
    w.add_entry([5, 6])
    with pytest.raises(ValueError) as err:
        w.add_entry(entry)
    assert f"entry 1: token at position {position} " in str(err.value)
    assert message in str(err.value)
    # The bad entry added nothing; the good one survives.
    w.add_entry([7])
    assert w.finalize()["tokens"] == 3


def test_nested_and_string_entries_are_refused(tmp_path):
    w = Writer(tmp_path / "x.idx", 100)
    with pytest.raises(ValueError, match="entry 0: expected a flat sequence"):
        w.add_entry([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="entry 1: expected a sequence of token ids"):
        w.add_entry("hello")


def test_bad_context_tokens(build_index):
    r = build_index([[1, 2, 3]], vocab_size=10)
    with pytest.raises(ValueError, match="context: token at position 1 is 10, outside the vocabulary"):
        r.search([1, 10])
    with pytest.raises(ValueError, match="context: token at position 0 is -3"):
        r.search([-3, 1])
    with pytest.raises(ValueError, match="context 1: token at position 0 is not an int"):
        r.search_batch([[1, 2], ["x"]])


def test_bad_writer_arguments(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        Writer(tmp_path / "x.idx", 0)
    with pytest.raises(ValueError, match="fingerprint"):
        Writer(tmp_path / "x.idx", 10, tokenizer_fingerprint="x" * 200)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Writer(tmp_path / "no" / "such" / "dir.idx", 10)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        Reader(tmp_path / "nope.idx")
    with pytest.raises(ValueError, match="directory"):
        Reader(tmp_path)


def _good(build_index):
    r = build_index([[1, 2, 3, 4], [1, 2, 3, 5]], vocab_size=10)
    return r.path, r.path.read_bytes()


def _reheader(data: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    struct.pack_into("<I", b, 252, zlib.crc32(bytes(b[:252])))
    return bytes(b)


def test_wrong_magic(build_index):
    path, data = _good(build_index)
    path.write_bytes(b"GGUF" + data[4:])
    with pytest.raises(IndexFormatError, match="not a Draftscope index"):
        Reader(path)
    path.write_bytes(b"")
    with pytest.raises(IndexFormatError, match="not a Draftscope index"):
        Reader(path)


def test_truncated(build_index):
    path, data = _good(build_index)
    for cut in (len(data) - 1, len(data) // 2, 300, 100, 9):
        path.write_bytes(data[:cut])
        with pytest.raises(IndexFormatError, match="truncated"):
            Reader(path)


def test_newer_version_is_refused_with_a_message(build_index):
    path, data = _good(build_index)
    path.write_bytes(_reheader(data, 8, "<I", FORMAT_VERSION + 1))
    with pytest.raises(NewerIndexVersionError, match=f"version {FORMAT_VERSION + 1}.*upgrade Draftscope"):
        Reader(path)


def test_corrupt_header_fields(build_index):
    path, data = _good(build_index)
    b = bytearray(data)
    b[30] ^= 1  # token count, checksum not updated
    path.write_bytes(bytes(b))
    with pytest.raises(IndexFormatError, match="corrupt: header checksum"):
        Reader(path)
    # A consistent checksum over inconsistent fields.
    path.write_bytes(_reheader(data, 32, "<Q", 10**12))
    with pytest.raises(IndexFormatError, match="corrupt|truncated"):
        Reader(path)
    path.write_bytes(data + b"\0" * 8)
    with pytest.raises(IndexFormatError, match="trailing bytes"):
        Reader(path)


def test_corrupt_body_is_found_by_verify(build_index):
    path, data = _good(build_index)
    b = bytearray(data)
    b[260] ^= 0xFF
    path.write_bytes(bytes(b))
    r = Reader(path)  # opening reads the header only
    with pytest.raises(IndexFormatError, match="body checksum"):
        r.verify()


@pytest.mark.parametrize("in_thread_pool", [False, True])
def test_rust_panic_becomes_a_python_exception(in_thread_pool):
    from draftscope import _retriever

    with pytest.raises(RuntimeError, match="internal error in the retriever.*deliberate panic"):
        _retriever._panic_for_test(in_thread_pool)
    # The interpreter and the extension keep working afterwards.
    with pytest.raises(RuntimeError):
        _retriever._panic_for_test(in_thread_pool)


# ---------------------------------------------------------------- files changed on disk, odd files, sizes

CHANGE_ON_DISK = r"""
import shutil, sys
from draftscope.retrieval import IndexChangedError, Reader
path, other, mode = sys.argv[1], sys.argv[2], sys.argv[3]
reader = Reader(path, in_memory={"memory": True, "mapped": False}[mode])
before = reader.search([1, 2], max_nodes=8).tokens.tolist()
shutil.copyfile(other, path)  # cp other path: the same file, truncated, then written
print("state", reader.disk_state())
with open(path, "r+b") as f:
    f.truncate(64)
try:
    after = reader.search([1, 2], max_nodes=8).tokens.tolist()
    print("same" if after == before else "different")
except IndexChangedError as exc:
    print("error", exc)
"""


@pytest.mark.parametrize("mode", ["memory", "mapped"])
def test_an_index_copied_over_or_truncated_while_open_never_kills_the_process(build_index, tmp_path, mode):
    import subprocess
    import sys

    reader = build_index([[1, 2, 3, 4]] * 5 + [[1, 2, 5]], vocab_size=10)
    other = build_index([[7, 8, 9]] * 40, vocab_size=10, name="other.idx")
    done = subprocess.run(
        [sys.executable, "-c", CHANGE_ON_DISK, str(reader.path), str(other.path), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert lines[0] == "state modified"
    if mode == "memory":
        assert lines[1] == "same", "a copy in memory keeps giving the drafts it gave"
    else:
        assert lines[1].startswith("error ") and "changed on disk" in lines[1] and str(reader.path) in lines[1]


def test_a_rebuilt_index_is_reported_as_replaced(build_index):
    reader = build_index([[1, 2, 3, 4]], vocab_size=10)
    assert reader.disk_state() == "same" and reader.in_memory
    build_index([[1, 2, 5, 6]], vocab_size=10)  # same name: written aside, renamed into place
    assert reader.disk_state() == "replaced"
    assert reader.search([1, 2]).tokens.tolist()[:1] == [3], "the open reader still reads what it opened"


def test_a_fifo_is_refused_at_once(tmp_path):
    import os
    import subprocess
    import sys

    fifo = tmp_path / "pipe.idx"
    os.mkfifo(fifo)
    code = "import sys\nfrom draftscope.retrieval import Reader\ntry:\n Reader(sys.argv[1])\nexcept ValueError as e:\n print(e)"
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30)
    assert "is a named pipe (FIFO), not an index file" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(
    "name, value",
    [("max_nodes", 2**32), ("max_nodes", 2**63), ("max_matches", 2**40), ("max_suffix", 2**62), ("max_nodes", 2**64)],
)
def test_huge_size_arguments_are_refused_naming_them(build_index, name, value):
    reader = build_index([[1, 2, 3, 4]], vocab_size=10)
    for call in (lambda **kw: reader.search([1, 2], **kw), lambda **kw: reader.search_batch([[1, 2]], **kw)):
        with pytest.raises(ValueError, match=name):
            call(**{name: value})
    assert reader.search([1, 2], max_nodes=65536).tokens.tolist() == [3, 4]
