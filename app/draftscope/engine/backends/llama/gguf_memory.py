"""What a GGUF model takes in memory where llama.cpp puts it, read from the file's own tensor sizes
(no load): the layers a card's free memory holds, and each machine's share when RPC workers split it.

llama.cpp's placement, which the estimate follows: with ``n_gpu_layers`` = k the *last* k layers go to
the card; k above the layer count puts the output head there too (the norm and ``output.weight``,
or the token embeddings again when the model ties them); the token embeddings themselves stay with
the host, which looks rows up. Each layer's KV cache (f16) sits beside its layer. The compute
buffers are estimated on the safe side (attention scores as if flash attention were off): a layer
too few costs a little speed, a layer too many fails the load (gpu_offload.py then tries fewer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from draftscope.models.gguf_header import GgufHeader, read_gguf_header

KV_BYTES = 2  # f16 keys and values: llama.cpp's default cache type
FLOAT = 4  # f32 activations in the compute buffer
CARD_RESERVE = 400 << 20  # the CUDA context, cuBLAS's workspace, the graph: held whatever the model


@dataclass(frozen=True)
class GgufMemory:
    layers: tuple[int, ...]  # each transformer layer's weights, bytes as stored
    inputs: int  # the token embeddings (kept with the host)
    output: int  # the output head and its norm, as it would be copied to the card
    outside: int  # every tensor outside the layers, as stored (embeddings, head, rope tables)
    kv_per_position: int  # one position's keys and values in one layer (f16)
    embedding: int
    feed_forward: int
    heads: int
    vocab: int
    trained_context: int  # 0 where the file does not say

    @classmethod
    def read(cls, path) -> GgufMemory:
        """The sizes of the GGUF at ``path`` (its header and tensor table, models/gguf_header.py;
        no weight is read). Raises ValueError (GgufHeaderError on a damaged file)."""
        header = read_gguf_header(path)
        number = header.number
        sizes = {t.name: t.n_bytes for t in header.tensors}
        count = number("block_count")
        if count <= 0:
            raise ValueError(
                f"{Path(path).name} does not say how many layers it has ({header.architecture}.block_count)"
            )
        heads = max(number("attention.head_count", 1), 1)
        embedding = number("embedding_length")
        key = number("attention.key_length", embedding // heads)
        value = number("attention.value_length", key)
        kv_heads = number("attention.head_count_kv", heads)
        layers, inputs, output, outside = _group(sizes, count)
        vocab = _vocab(header, sizes.get("token_embd.weight", 0), embedding)
        return cls(
            layers=tuple(layers),
            inputs=inputs,
            output=output,
            outside=outside,
            kv_per_position=kv_heads * (key + value) * KV_BYTES,
            embedding=embedding,
            feed_forward=number("feed_forward_length", 4 * embedding),
            heads=heads,
            vocab=vocab,
            trained_context=number("context_length"),
        )

    @property
    def count(self) -> int:
        """Transformer layers; llama.cpp's "all layers" is one more (the output head)."""
        return len(self.layers)

    def weights_on_card(self, gpu_layers: int) -> int:
        """Bytes of weights ``gpu_layers`` (llama.cpp's n_gpu_layers) put on the card."""
        k = self.clamp(gpu_layers)
        on_card = sum(self.layers[self.count - min(k, self.count) :]) if k else 0
        return on_card + (self.output if k > self.count else 0)

    def on_card(self, gpu_layers: int, positions: int, batch: int) -> int:
        """Everything the card holds for ``gpu_layers``: weights, the KV cache of ``positions`` cells in
        the layers there, and the compute buffers of a ``batch``-token decode (0 with no layer there)."""
        k = self.clamp(gpu_layers)
        if k == 0:
            return 0
        kv = min(k, self.count) * positions * self.kv_per_position
        return self.weights_on_card(k) + kv + self.compute_buffer(k, positions, batch) + CARD_RESERVE

    def compute_buffer(self, gpu_layers: int, positions: int, batch: int) -> int:
        """The card's activations for a ``batch``-token decode, on the safe side: a layer's widest
        tensors, the attention scores over every position, and the logits when the head is there."""
        widest = 4 * self.embedding + 2 * self.feed_forward + self.heads * positions
        head = self.vocab if self.clamp(gpu_layers) > self.count else 0
        return batch * (widest + head) * FLOAT

    def layers_that_fit(self, free: int, positions: int, batch: int) -> int:
        """The most layers (llama.cpp's count: ``count + 1`` is all, the head included) whose
        :meth:`on_card` stays within ``free`` bytes."""
        for k in range(self.count + 1, 0, -1):
            if self.on_card(k, positions, batch) <= free:
                return k
        return 0

    def clamp(self, gpu_layers: int) -> int:
        """llama.cpp's reading of n_gpu_layers: negative or above the layers, all of them and the head."""
        return self.count + 1 if gpu_layers < 0 or gpu_layers > self.count else gpu_layers


def _group(sizes: dict[str, int], count: int) -> tuple[list[int], int, int, int]:
    """(each layer's bytes, token embeddings, output head as the card gets it, everything outside
    the layers as stored) of a tensor table."""
    layers, outside = [0] * count, 0
    for name, n in sizes.items():
        found = re.match(r"blk\.(\d+)\.", name)
        if found and int(found.group(1)) < count:
            layers[int(found.group(1))] += n
        else:
            outside += n
    inputs = sizes.get("token_embd.weight", 0)
    # tied embeddings: llama.cpp copies the token embeddings to where the output head runs
    output = sizes.get("output.weight", inputs) + sizes.get("output_norm.weight", 0)
    return layers, inputs, output, outside


def _vocab(header: GgufHeader, embeddings: int, embedding: int) -> int:
    tokens = header.lengths.get("tokenizer.ggml.tokens")
    if tokens is not None:
        return tokens
    return embeddings // max(embedding, 1)  # a rough figure from the table (quantised rows are smaller)


def memory_per_machine(path, split: dict[str, int], positions: int, first: str) -> dict[str, int]:
    """Bytes each machine of ``split`` (layers per machine, ``first`` holding the first layers and
    the tensors outside them, the others the next layers in order) holds for the model: its layers'
    weights as stored and their KV cache (``positions`` cells). llama.cpp adds compute buffers."""
    sizes = GgufMemory.read(path)
    layers = list(sizes.layers) + [0] * max(0, sum(split.values()) - sizes.count)
    rest = sizes.outside
    out, at = {}, 0
    for machine, count in split.items():
        held = sum(layers[at : at + count]) + count * positions * sizes.kv_per_position
        out[machine] = held + (rest if machine == first else 0)
        at += count
    return out
