"""A small GGUF carrying a model's recommended sampling (llama.cpp's general.sampling.* keys), for
the tests of reading it (tests/core/test_sampling_defaults.py) and of showing it (Settings ▸ Generation)."""

from __future__ import annotations

import gguf
import numpy as np


def write_gguf(path, **sampling):
    """A small GGUF (a vocabulary, merges and one tensor, which the reader skips) with
    ``general.sampling.<key>`` set to each value (a float, an int or a string, by its Python type)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list([f"tok{i}" for i in range(300)])
    writer.add_token_merges([f"t o{i}" for i in range(200)])
    for key, value in sampling.items():
        name = f"general.sampling.{key}"
        if isinstance(value, str):
            writer.add_string(name, value)
        elif isinstance(value, int):
            writer.add_int32(name, value)
        else:
            writer.add_float32(name, value)
    writer.add_uint32("llama.block_count", 1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
