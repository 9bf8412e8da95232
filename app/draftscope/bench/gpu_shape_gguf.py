"""``draftscope bench gpu --backend llama.cpp --shape NAME``: a GGUF of one of the bench's shapes
(gpu_models.SHAPES) with random weights, in the block types the real files of that size hold, for
llama.cpp on a machine no model file can reach (the GPU machines have no network, and a transfer holds
64 MiB: Qwen2.5-Coder-1.5B's Q4_K_M is 1.1 GB). What llama.cpp computes costs what it costs on the
real file: the same tensors, shapes and block types; what it answers is noise (no tokenizer: the
vocabulary is the byte tokens and placeholders, prompts are seeded random ids, as for the torch
shapes). The blocks are random bytes with their f16 scales kept small, so products stay finite, and
the end token's row of the head is zero, so that answers run to ``--tokens`` as the torch shapes' do.

Written once under the cache's bench folder (kept for the next run: a 7B shape is 4.5 GB) and
opened from the same pieces open_backend uses (choose_backend, open_on_card, LlamaCppBackend), with
the ids-only tokenizer of the torch shapes, since the file has no real vocabulary to load.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

# Where each block type keeps its f16 scale(s), and small values for them (Q4_1 also its minimum,
# which centres its 16 levels on zero)
BLOCK_SCALES = {
    "Q4_1": (slice(0, 4), [0.002, -0.015]),
    "Q8_0": (slice(0, 2), [0.0005]),
    "Q4_K": (slice(0, 4), [0.002, 0.001]),
    "Q6_K": (slice(-2, None), [0.002]),
}
CONTEXTS = {"smollm2-135m": 8192}  # positions a shape was trained for; Qwen2.5's 32,768 otherwise
BOS, EOS = 257, 258  # gguf_writer.byte_vocab's controls
LAYOUT = 1  # in the file's name: a file written by an earlier layout of this module is written anew


class FileTypes(NamedTuple):
    """The block types of a quantised file, as llama.cpp's quantiser chooses them."""

    name: str  # the file's type, e.g. Q4_K_M
    matrices: str  # most products
    more_bits: str  # attn_v and ffn_down of every other layer (Q4_K_M's "more bits" layers)
    embeddings: str
    output: str


# Q4_K_M where every product's rows are whole K-quant blocks of 256 (Qwen2.5-1.5B and 7B), as in
# their published files; Q4_1 otherwise (SmolLM2-135M's published file, whose embeddings are Q8_0)
Q4_K_M = FileTypes("Q4_K_M", "Q4_K", "Q6_K", "Q4_K", "Q6_K")
Q4_1 = FileTypes("Q4_1", "Q4_1", "Q4_1", "Q8_0", "Q8_0")


def file_types(shape: dict) -> FileTypes:
    k_blocks = all(shape[key] % 256 == 0 for key in ("hidden_size", "intermediate_size"))
    return Q4_K_M if k_blocks else Q4_1


def random_blocks(rows: int, cols: int, qtype: str, rng: np.random.Generator):
    """A ``rows`` x ``cols`` weight as random ``qtype`` blocks, their scales small (BLOCK_SCALES)."""
    import gguf

    from draftscope.engine.backends.llama.gguf_writer import Quantised

    kind = gguf.GGMLQuantizationType[qtype]
    block, size = gguf.GGML_QUANT_SIZES[kind]
    if cols % block:
        raise ValueError(f"{qtype} needs rows of whole {block}-weight blocks; this weight's are {cols} wide")
    blocks = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    where, scales = BLOCK_SCALES[qtype]
    blocks[:, :, where] = np.array(scales, dtype=np.float16).view(np.uint8)
    return Quantised(int(kind), blocks.reshape(rows, -1))


def shape_gguf_path(shape: str) -> Path:
    from draftscope import paths
    from draftscope.bench.gpu_models import SHAPES

    return paths.bench_dir() / "shapes" / f"{shape}-random-{file_types(SHAPES[shape]).name}-v{LAYOUT}.gguf"


def _weights(config: dict, types: FileTypes, rng: np.random.Generator) -> dict:
    """Hugging Face names -> blocks; layers share their blocks (the costs are the same, the file is
    written in seconds): one set for even layers, one for odd ones, where the types alternate."""
    hidden, ffn, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * hidden // config["num_attention_heads"]
    output = random_blocks(vocab, hidden, types.output, rng)
    output.data[EOS] = 0  # the end token's logit is 0, never the best of a row of random ones
    weights = {
        "model.embed_tokens.weight": random_blocks(vocab, hidden, types.embeddings, rng),
        "model.norm.weight": np.ones(hidden, np.float32),
        "lm_head.weight": output,
    }
    products = {
        "self_attn.q_proj": (hidden, hidden, False),
        "self_attn.k_proj": (kv, hidden, False),
        "self_attn.v_proj": (kv, hidden, True),
        "self_attn.o_proj": (hidden, hidden, False),
        "mlp.gate_proj": (ffn, hidden, False),
        "mlp.up_proj": (ffn, hidden, False),
        "mlp.down_proj": (hidden, ffn, True),
    }
    made: dict = {}
    for i in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{i}."
        weights[prefix + "input_layernorm.weight"] = weights["model.norm.weight"]
        weights[prefix + "post_attention_layernorm.weight"] = weights["model.norm.weight"]
        for name, (rows, cols, more) in products.items():
            qtype = types.more_bits if more and i % 2 == 0 else types.matrices
            key = (rows, cols, qtype)
            made[key] = made.get(key) or random_blocks(rows, cols, qtype, rng)
            weights[prefix + name + ".weight"] = made[key]
    return weights


def write_shape_gguf(shape: str) -> Path:
    """The shape's random GGUF (shape_gguf_path), written unless it is there already."""
    from draftscope.bench.gpu_models import SHAPES
    from draftscope.engine.backends.llama.gguf_writer import byte_vocab, write_llama_gguf

    path = shape_gguf_path(shape)
    if path.is_file():
        return path
    config, types = SHAPES[shape], file_types(SHAPES[shape])
    tokens = byte_vocab()
    tokens += [f"<shape-{i}>" for i in range(len(tokens), config["vocab_size"])]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    write_llama_gguf(
        partial,
        weights=_weights(config, types, np.random.default_rng(0)),
        hidden=config["hidden_size"],
        layers=config["num_hidden_layers"],
        ffn=config["intermediate_size"],
        heads=config["num_attention_heads"],
        kv_heads=config["num_key_value_heads"],
        context=CONTEXTS.get(shape, 32768),
        tokens=tokens,
        merges=["Ġ Ġ"],
        control={BOS, EOS},
        eos=EOS,
        bos=BOS,
        rope_theta=1e6,
        name=f"{shape} (random weights, {types.name})",
    )
    partial.replace(path)
    return path


def open_shape_engine(args, longest: int, prompt_len: int):
    """(engine, prompt): the shape's GGUF on llama.cpp, its layers on the card by --gpu-layers as
    open_backend would put them, with room for ``longest`` cached tokens; the prompt ``prompt_len``
    seeded random ids."""
    from types import SimpleNamespace

    from draftscope.bench.gpu_models import IdsOnly
    from draftscope.engine.backends import choose_backend
    from draftscope.engine.backends.llama.gpu_offload import open_on_card
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
    from draftscope.engine.engine import Engine

    path = write_shape_gguf(args.shape)
    choice = choose_backend(SimpleNamespace(kind="gguf", display_name=path.name), "llama.cpp", args.device)
    common = dict(name=args.shape, context=longest, slots=1, repacked=choice.repacked)
    if choice.on_card and args.gpu_layers != 0:
        backend = open_on_card(path, IdsOnly(), args.gpu_layers, **common)
    else:
        backend = LlamaCppBackend(path, IdsOnly(), **common)
    engine = Engine(backend=backend)
    prompt = np.random.default_rng(1).integers(0, engine.vocab, prompt_len).tolist()
    return engine, prompt
