"""Thousands of randomly damaged index files: every one is refused with IndexFormatError or
opened and searched without a crash or hang."""

import struct
import zlib

import numpy as np

from draftscope.retrieval import IndexFormatError, Reader, Writer

HEADER_FIELDS = [(8, "<I"), (16, "<B"), (17, "<B"), (20, "<I"), (24, "<Q"), (32, "<Q"), (40, "<Q"), (48, "<Q"), (56, "<Q"), (64, "<Q"), (76, "<I")]


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    kind = rng.integers(0, 6)
    if kind == 0:  # flip random bytes anywhere
        for _ in range(rng.integers(1, 8)):
            b[rng.integers(0, len(b))] ^= int(rng.integers(1, 256))
    elif kind == 1:  # truncate
        del b[rng.integers(0, len(b)) :]
    elif kind == 2:  # extend with junk
        b += bytes(rng.integers(0, 256, size=rng.integers(1, 64), dtype=np.uint8))
    elif kind == 3:  # overwrite the body with random data, keeping the header intact
        start = rng.integers(256, len(b))
        end = min(len(b), start + rng.integers(1, 200))
        b[start:end] = bytes(rng.integers(0, 256, size=end - start, dtype=np.uint8))
    else:  # a header field set to a random value with a *valid* header checksum
        off, fmt = HEADER_FIELDS[rng.integers(0, len(HEADER_FIELDS))]
        size = struct.calcsize(fmt)
        value = int(rng.integers(0, 2 ** min(8 * size, 63)))
        if kind == 5:
            value = int(rng.choice([0, 1, 2, 4, 8, 255, 2**32 - 1, value]))
            value &= (1 << (8 * size)) - 1
        struct.pack_into(fmt, b, off, value)
        struct.pack_into("<I", b, 252, zlib.crc32(bytes(b[:252])))
    return bytes(b)


def test_fuzzed_index_files_never_crash(tmp_path):
    rng = np.random.default_rng(1234)
    src = tmp_path / "good.idx"
    w = Writer(src, 12)
    for _ in range(30):
        w.add_entry(rng.integers(0, 12, size=rng.integers(1, 80)))
    w.finalize()
    good = src.read_bytes()
    contexts = [rng.integers(0, 12, size=6) for _ in range(5)]
    target = tmp_path / "fuzz.idx"
    outcomes = {"refused": 0, "opened": 0, "search_refused": 0}
    for _ in range(3000):
        target.write_bytes(mutate(good, rng))
        try:
            r = Reader(target)
        except IndexFormatError:
            outcomes["refused"] += 1
            continue
        outcomes["opened"] += 1
        try:
            for c in contexts:
                tree = r.search(c, max_nodes=32)
                assert len(tree) <= 32
            r.search_batch(contexts)
            r.verify()
        except ValueError:  # IndexFormatError, or a context outside a damaged vocab size
            outcomes["search_refused"] += 1
    # Both paths were exercised: damage detected at open, and damage that opens but is found later.
    assert outcomes["refused"] > 1000
    assert outcomes["opened"] > 100
    assert outcomes["search_refused"] > 50
