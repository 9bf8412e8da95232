"""Turning whatever the caller passes (list, numpy array, array('I'), generator) into an
int64 array of token ids, with errors that name the entry and the position."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np


def _is_token_int(value: object) -> bool:
    return isinstance(value, numbers.Integral)


# Integer arrays Rust reads in place (uint64 could hold ids past int64 and is converted).
NATIVE_DTYPES = frozenset(np.dtype(t) for t in (np.int64, np.int32, np.uint32, np.uint16, np.uint8, np.int16, np.int8))


def as_token_array(
    tokens: Iterable[int], vocab_size: int, what: str, *, check_range: bool = True, native: bool = False
) -> np.ndarray:
    """Return ``tokens`` as a contiguous 1-D integer array, every id in [0, vocab_size).

    ``what`` names the input in errors, e.g. "entry 12" or "context". With
    ``check_range=False`` the range check is left to Rust, which reports it the same way (the
    hot paths: search contexts and large builds). With ``native=True`` any integer dtype Rust
    reads in place is returned as is; otherwise the array is int64.
    """
    if type(tokens) is np.ndarray and tokens.ndim == 1 and not check_range:
        if tokens.dtype == np.int64 or (native and tokens.dtype in NATIVE_DTYPES):
            return np.ascontiguousarray(tokens)
    if isinstance(tokens, (str, bytes)):
        raise ValueError(f"{what}: expected a sequence of token ids, got {type(tokens).__name__}")
    if not isinstance(tokens, np.ndarray) and not hasattr(tokens, "__len__"):
        tokens = list(tokens)  # generators and other one-shot iterables
    try:
        arr = np.asarray(tokens)
    except (ValueError, TypeError, OverflowError):
        arr = np.asarray(list(tokens), dtype=object)
    if arr.ndim != 1:
        if arr.ndim == 0 or arr.size == 0:
            return np.zeros(0, np.int64)
        raise ValueError(f"{what}: expected a flat sequence of token ids, got an array of shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype.kind not in "iu":
        # Report the caller's own elements (numpy would have turned [1, 2.5] into floats).
        originals = arr.tolist() if isinstance(tokens, np.ndarray) else list(tokens)
        for position, value in enumerate(originals):
            if not _is_token_int(value):
                raise ValueError(f"{what}: token at position {position} is not an int: {value!r}")
        # All Python ints, but some too large for int64: locate the first out of range.
        _raise_out_of_range(originals, vocab_size, what)
    if arr.dtype == np.uint64 and arr.max() > np.iinfo(np.int64).max:
        _raise_out_of_range(arr.tolist(), vocab_size, what)
    if check_range and (arr.min() < 0 or arr.max() >= vocab_size):
        _raise_out_of_range(arr.tolist(), vocab_size, what)
    return arr.astype(np.int64, copy=False)


def _raise_out_of_range(values: list, vocab_size: int, what: str) -> None:
    for position, value in enumerate(values):
        if not 0 <= value < vocab_size:
            raise ValueError(
                f"{what}: token at position {position} is {value}, outside the vocabulary [0, {vocab_size})"
            )
