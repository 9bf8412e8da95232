"""The one GGUF header reader (models/gguf_header.py): on a good file it gives what the ``gguf``
package reads (architecture, counts, every tensor's place and size, the vocabulary's length, and
the arrays asked for in full); a damaged or hostile header or array is an error naming the file and
the fault, never a crash; a file is read once while it is unchanged."""

from __future__ import annotations

import os
import struct

import pytest

from draftscope.engine.backends.llama.gguf_writer import byte_vocab, random_llama
from draftscope.models.gguf_header import GgufHeaderError, read_gguf_arrays, read_gguf_header

STRING, ARRAY, UINT32 = 8, 9, 4


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return random_llama(tmp_path_factory.mktemp("gguf-header") / "good.gguf")


def test_a_good_file_reads_as_the_gguf_package_reads_it(good):
    from gguf import GGUFReader

    header = read_gguf_header(good)
    reader = GGUFReader(str(good))
    assert header.architecture == "llama" and header.number("block_count") == 2
    assert header.number("no_such_key", 7) == 7
    assert header.lengths["tokenizer.ggml.tokens"] == len(byte_vocab())
    ours = [(t.name, t.offset, t.n_bytes, t.type) for t in header.tensors]
    theirs = [(t.name, int(t.data_offset), int(t.n_bytes), int(t.tensor_type)) for t in reader.tensors]
    assert ours == theirs and len(ours) > 10
    assert header.data_end <= header.size == good.stat().st_size


def test_a_file_is_read_once_until_it_changes(good, tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(good.read_bytes())
    first = read_gguf_header(model)
    assert read_gguf_header(model) is first
    random_llama(model, layers=3)
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert read_gguf_header(model).number("block_count") == 3


def text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<Q", len(raw)) + raw


def key(name: str, kind: int, payload: bytes) -> bytes:
    return text(name) + struct.pack("<I", kind) + payload


def tensor(name: str, dims=(4,), kind: int = 0, offset: int = 0) -> bytes:
    return text(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)


def gguf(keys=(), tensors=(), *, version: int = 3, key_count=None, tensor_count=None) -> bytes:
    counts = (len(tensors) if tensor_count is None else tensor_count, len(keys) if key_count is None else key_count)
    return b"GGUF" + struct.pack("<IQQ", version, *counts) + b"".join(keys) + b"".join(tensors)


ARCH = key("general.architecture", STRING, text("llama"))
DEEP = struct.pack("<IQ", ARRAY, 1) * 12 + struct.pack("<IQ", UINT32, 0)

DAMAGED = {
    "empty": (b"", "not a GGUF file"),
    "foreign": (b"GGML" + bytes(40), "not a GGUF file"),
    "version": (gguf([ARCH], version=1), "version 1"),
    "counts": (gguf([ARCH], key_count=1 << 40), "do not fit"),
    "nesting": (gguf([key("a", ARRAY, DEEP)]), "nested more than"),
    "value type": (gguf([key("a", 77, b"")]), "unknown value type 77"),
    "long string": (gguf([key("a", STRING, struct.pack("<Q", 1 << 50))]), "runs past the end"),
    "huge string": (gguf([key("a", STRING, struct.pack("<Q", (1 << 64) - 1)), ARCH]), "runs past the end"),
    "dimensions": (gguf([ARCH], [tensor("w", dims=(1,) * 5)]), "w has 5 dimensions"),
    "tensor type": (gguf([ARCH], [tensor("w", kind=999)]), "w has an unknown type 999"),
    "twice": (gguf([ARCH], [tensor("w"), tensor("w", offset=32)]), "w is listed twice"),
    "alignment": (gguf([ARCH, key("general.alignment", UINT32, struct.pack("<I", 0))], [tensor("w")]), "power of two"),
    "cut": (gguf([ARCH], [tensor("w")])[:40], "runs past the end"),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_header_is_an_error_naming_the_file_and_the_fault(tmp_path, case):
    data, words = DAMAGED[case]
    path = tmp_path / f"{case.replace(' ', '-')}.gguf"
    path.write_bytes(data)
    with pytest.raises(GgufHeaderError, match=words) as caught:
        read_gguf_header(path)
    assert path.name in str(caught.value)


def test_a_small_sound_header_reads_and_a_missing_file_is_named(tmp_path):
    path = tmp_path / "small.gguf"
    path.write_bytes(gguf([ARCH, key("llama.block_count", UINT32, struct.pack("<I", 5))], [tensor("w", dims=(4, 2))]))
    header = read_gguf_header(path)
    assert header.number("block_count") == 5 and header.tensors[0].n_bytes == 8 * 4  # F32
    assert header.tensors[0].offset % 32 == 0 and header.data_end > header.size  # no data: cut short
    with pytest.raises(GgufHeaderError, match="missing.gguf"):
        read_gguf_header(tmp_path / "missing.gguf")


def test_arrays_asked_for_read_in_full_as_the_gguf_package_reads_them(good):
    from gguf import GGUFReader

    fields = GGUFReader(str(good)).fields
    tokens, merges, kinds = "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"
    arrays = read_gguf_arrays(good, [tokens, merges, kinds, "no.such.key"])
    assert set(arrays) == {tokens, merges, kinds}  # a key the file lacks is left out
    for key in (tokens, merges):
        assert arrays[key] == [bytes(fields[key].parts[i]).decode() for i in fields[key].data]
    assert arrays[kinds] == [int(fields[kinds].parts[i][0]) for i in fields[kinds].data]
    assert arrays[tokens] == byte_vocab() and arrays[kinds].count(3) == 2  # the two controls


def array(item: int, length: int, payload: bytes = b"") -> bytes:
    return struct.pack("<IQ", item, length) + payload


DAMAGED_ARRAYS = {
    "not utf-8": (
        gguf([ARCH, key("t", ARRAY, array(STRING, 1, struct.pack("<Q", 2) + b"\xff\xfe"))]),
        "item 0 of t is not UTF-8",
    ),
    "strings past the end": (gguf([ARCH, key("t", ARRAY, array(STRING, 1 << 60))]), "array longer than the file"),
    "numbers past the end": (gguf([ARCH, key("t", ARRAY, array(UINT32, 1 << 60))]), "runs past the end"),
    "cut inside": (gguf([ARCH, key("t", ARRAY, array(STRING, 2, text("a") + text("bc")))])[:-1], "runs past the end"),
    "arrays of arrays": (
        gguf([ARCH, key("t", ARRAY, array(ARRAY, 1, array(UINT32, 0)))]),
        "t is an array of value type 9",
    ),
    "a single value": (gguf([ARCH, key("t", UINT32, struct.pack("<I", 7))]), "t is a single value"),
}


@pytest.mark.parametrize("case", DAMAGED_ARRAYS)
def test_a_damaged_array_is_an_error_naming_the_file_and_the_fault(tmp_path, case):
    data, words = DAMAGED_ARRAYS[case]
    path = tmp_path / f"{case.replace(' ', '-')}.gguf"
    path.write_bytes(data)
    with pytest.raises(GgufHeaderError, match=words) as caught:
        read_gguf_arrays(path, ["t"])
    assert path.name in str(caught.value)
