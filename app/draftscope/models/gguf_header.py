"""The one reader of a GGUF file's header: its metadata (key-value section) and its tensor table,
never a weight. Every part of the app that needs a fact of the file (the check before llama.cpp
opens it, the memory estimate for a card or RPC workers, the sampling it recommends) reads it here.

Read with a small parser of our own, not the ``gguf`` package's reader: that one builds numpy arrays
for every token of the vocabulary (seconds for a large one) and meets a damaged file with whatever
numpy raises. Here every length and count is checked against the file before it is used, so a
damaged or hostile file is a :class:`GgufHeaderError` naming the file, never a crash or a huge
allocation. Arrays (the vocabulary, its merges) are skipped and kept as their lengths and places;
:func:`read_gguf_arrays` reads the ones a caller names (the tokenizer's), with the same checks.

The result is kept per file (path, size, modification time): one load reads the header once,
whoever asks.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# GGUF value types: id -> struct format of a scalar (8 string, 9 array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
VERSIONS = (2, 3)  # what llama.cpp reads (version 1 counted in 32 bits)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS: llama.cpp refuses a tensor with more
MAX_NESTING = 8  # arrays of arrays: a model has none deeper than 2; beyond is damage
MAX_KEPT_STRING = 1 << 20  # longer string values are skipped (no fact we read is that long)
DEFAULT_ALIGNMENT = 32


class GgufHeaderError(ValueError):
    """A file whose header cannot be read: the message names the file and what is wrong."""


class ArrayInfo(NamedTuple):
    item: int  # the value type of its items
    length: int
    offset: int  # where its first item starts in the file


class TensorInfo(NamedTuple):
    name: str
    shape: tuple[int, ...]  # as the file lists it (innermost first)
    type: int  # ggml's type id (gguf.GGMLQuantizationType)
    offset: int  # where its data starts in the file
    n_bytes: int


@dataclass(frozen=True)
class GgufHeader:
    version: int
    size: int  # the file's length in bytes
    values: dict  # key -> scalar or string (strings past MAX_KEPT_STRING left out)
    lengths: dict  # key of an array value -> its length
    tensors: tuple[TensorInfo, ...]
    arrays: dict  # key of an array value -> its ArrayInfo (read by read_gguf_arrays)

    @property
    def architecture(self) -> str | None:
        arch = self.values.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def number(self, key: str, default: int = 0) -> int:
        """The whole number ``<architecture>.<key>`` (e.g. ``block_count``), or ``default``."""
        value = self.values.get(f"{self.architecture}.{key}")
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return int(value) if is_number else default

    @property
    def data_end(self) -> int:
        """Where the last tensor's data ends: past the file's size, the file is cut short."""
        return max((t.offset + t.n_bytes for t in self.tensors), default=0)


def read_gguf_header(path) -> GgufHeader:
    """The header of the GGUF at ``path``, kept while the file is unchanged. Raises GgufHeaderError."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise GgufHeaderError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _read_kept(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_kept(path: str, size: int, mtime_ns: int) -> GgufHeader:
    with _mapped(path) as data:
        return _parse(data)


def read_gguf_arrays(path, keys) -> dict[str, list]:
    """The arrays under ``keys`` (of strings or of numbers: a vocabulary, its merges, token types),
    read in full; a key the file lacks is left out. Raises GgufHeaderError naming the file."""
    path = Path(path)
    header = read_gguf_header(path)
    with _mapped(str(path.resolve())) as data:
        if len(data) != header.size:
            raise ValueError("the file changed while it was read")
        found = {}
        for key in keys:
            if key in header.values:
                raise ValueError(f"metadata {key} is a single value, not an array")
            if key in header.arrays:
                found[key] = _array(data, header.arrays[key], key)
        return found


@contextlib.contextmanager
def _mapped(path: str):
    """The GGUF at ``path``, mapped for reading; any fault met while it is read is a GgufHeaderError
    naming the file."""
    name = Path(path).name
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
            if magic != b"GGUF":
                raise GgufHeaderError(f"{name} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                yield data
    except OSError as exc:
        raise GgufHeaderError(f"cannot read {name}: {exc.strerror or exc}") from None
    except (struct.error, IndexError, OverflowError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, GgufHeaderError):
            raise
        raise GgufHeaderError(f"{name} is a damaged GGUF: {_words(exc)}") from None


def _words(exc: Exception) -> str:
    # struct's and Python's words ("unpack_from requires a buffer of ...", "int too large to convert")
    if isinstance(exc, (struct.error, IndexError, OverflowError)):
        return "its header runs past the end of the file"
    return str(exc)


def _parse(data) -> GgufHeader:
    version, tensor_count, key_count = struct.unpack_from("<IQQ", data, 4)
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version}, not one llama.cpp reads ({', '.join(map(str, VERSIONS))})")
    if key_count > len(data) or tensor_count > len(data):  # each takes bytes of the file
        raise ValueError(f"{key_count:,} keys and {tensor_count:,} tensors do not fit in the file")
    values, arrays, at = {}, {}, 24
    for _ in range(key_count):
        key, at = _string(data, at)
        (kind,) = struct.unpack_from("<I", data, at)
        at = _value(data, kind, at + 4, key, values, arrays)
    if at > len(data):
        raise ValueError("its metadata runs past the end of the file")
    table, at = _tensor_table(data, at, tensor_count)
    start = _aligned(at, _alignment(values))
    tensors = tuple(info._replace(offset=start + info.offset) for info in table)
    lengths = {key: info.length for key, info in arrays.items()}
    return GgufHeader(version, len(data), values, lengths, tensors, arrays)


def _value(data, kind: int, at: int, key: str, values: dict, arrays: dict) -> int:
    """Reads the value of ``key`` (type ``kind``) at ``at`` into ``values`` or ``arrays``; returns its end."""
    if kind in _SCALARS:
        (values[key],) = struct.unpack_from(_SCALARS[kind], data, at)
    elif kind == _STRING:
        (length,) = struct.unpack_from("<Q", data, at)
        if length <= MAX_KEPT_STRING:
            values[key], _ = _string(data, at, strict=False)
    elif kind == _ARRAY:
        arrays[key] = ArrayInfo(*struct.unpack_from("<IQ", data, at), at + 12)
    else:
        raise ValueError(f"metadata {key} has an unknown value type {kind}")
    return _skip(data, kind, at)


def _string(data, at: int, strict: bool = True) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, at)
    end = at + 8 + length
    if end > len(data):
        raise ValueError("a string runs past the end of the file")
    raw = bytes(data[at + 8 : end])
    return raw.decode("utf-8") if strict else raw.decode("utf-8", errors="replace"), end


def _skip(data, kind: int, at: int, depth: int = 0) -> int:
    """Where the value of type ``kind`` starting at ``at`` ends."""
    if kind in _SCALARS:
        return at + struct.calcsize(_SCALARS[kind])
    if kind == _STRING:
        (length,) = struct.unpack_from("<Q", data, at)
        return at + 8 + length
    if kind != _ARRAY:
        raise ValueError(f"an unknown GGUF value type {kind}")
    if depth >= MAX_NESTING:
        raise ValueError(f"arrays nested more than {MAX_NESTING} deep")
    item, length = struct.unpack_from("<IQ", data, at)
    at += 12
    if item in _SCALARS:
        return at + length * struct.calcsize(_SCALARS[item])
    if length > len(data):
        raise ValueError("an array longer than the file")
    for _ in range(length):  # strings (a vocabulary, its merges) or nested arrays
        at = _skip(data, item, at, depth + 1)
        if at > len(data):
            raise ValueError("an array runs past the end of the file")
    return at


def _array(data, info: ArrayInfo, key: str) -> list:
    """The items of the array ``key`` described by ``info``, each checked to lie inside the file."""
    room = len(data) - info.offset
    if info.item in _SCALARS:
        fmt = _SCALARS[info.item]
        if info.length * struct.calcsize(fmt) > room:
            raise ValueError(f"{key} runs past the end of the file")
        return list(struct.unpack_from(f"<{info.length}{fmt[1]}", data, info.offset))
    if info.item != _STRING:
        raise ValueError(f"{key} is an array of value type {info.item}, not of strings or numbers")
    if info.length * 8 > room:  # each string takes at least its 8-byte length
        raise ValueError(f"{key} holds more strings than fit in the file")
    items, at = [], info.offset
    for index in range(info.length):
        try:
            item, at = _string(data, at)
        except UnicodeDecodeError:
            raise ValueError(f"item {index} of {key} is not UTF-8 text") from None
        items.append(item)
    return items


def _tensor_table(data, at: int, count: int) -> tuple[list[TensorInfo], int]:
    """The tensor table's entries (offsets from the data section's start) and where the table ends."""
    from gguf import GGML_QUANT_SIZES  # ggml's block sizes: the package tracks llama.cpp's types

    table, names = [], set()
    for _ in range(count):
        name, at = _string(data, at)
        (n_dims,) = struct.unpack_from("<I", data, at)
        if n_dims > MAX_DIMS:
            raise ValueError(f"tensor {name} has {n_dims} dimensions, at most {MAX_DIMS}")
        shape = struct.unpack_from(f"<{n_dims}Q", data, at + 4)
        kind, offset = struct.unpack_from("<IQ", data, at + 4 + 8 * n_dims)
        at += 4 + 8 * n_dims + 12
        sizes = GGML_QUANT_SIZES.get(kind)  # keyed by an IntEnum: a plain id finds its entry
        if sizes is None:
            raise ValueError(f"tensor {name} has an unknown type {kind}")
        if name in names:
            raise ValueError(f"tensor {name} is listed twice")
        names.add(name)
        elements = functools.reduce(lambda a, b: a * b, shape, 1)
        table.append(TensorInfo(name, shape, kind, offset, elements * sizes[1] // sizes[0]))
    return table, at


def _alignment(values: dict) -> int:
    alignment = values.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment {alignment!r} is not a power of two")
    return alignment


def _aligned(at: int, alignment: int) -> int:
    return at + (-at % alignment)
