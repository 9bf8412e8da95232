"""Writing a small llama-architecture GGUF from plain arrays: the self-test's quantised model (does
the installed llama.cpp run on this CPU, on the kernels real models take?), and the tests' tiny
models, which carry torch's weights into llama.cpp's layout."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np


class Quantised(NamedTuple):
    """A weight already in a GGML block type: ``data`` holds its bytes, one row of blocks per weight row."""

    qtype: int  # gguf.GGMLQuantizationType
    data: np.ndarray  # uint8, (rows, bytes per row)


def rope_layout(weight: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face's llama keeps each head's query/key rows as two halves (rotate_half);
    llama.cpp's llama reads them as interleaved pairs: reorder the rows of every head."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def write_llama_gguf(
    path: Path,
    *,
    weights: dict[str, np.ndarray | Quantised],
    hidden: int,
    layers: int,
    ffn: int,
    heads: int,
    kv_heads: int,
    context: int,
    tokens: list[str],
    merges: list[str],
    control: set[int],
    eos: int,
    bos: int,
    rms_eps: float = 1e-6,
    rope_theta: float = 10000.0,
    chat_template: str | None = None,
    name: str = "tiny",
) -> Path:
    """``weights``: Hugging Face llama names (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
    ..., lm_head.weight) as float32 arrays or Quantised blocks; ``tokens``/``merges``: a byte-level BPE ("gpt2")."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(rms_eps)
    writer.add_rope_freq_base(rope_theta)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_vocab_size(len(tokens))
    quantised = any(isinstance(w, Quantised) for w in weights.values())
    writer.add_file_type(gguf.LlamaFileType.GUESSED if quantised else gguf.LlamaFileType.ALL_F32)
    _add_bpe_tokenizer(writer, tokens, merges, control, eos=eos, bos=bos, chat_template=chat_template)
    _add_llama_tensors(writer, weights, layers=layers, heads=heads, kv_heads=kv_heads)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_bpe_tokenizer(
    writer, tokens: list[str], merges: list[str], control: set[int], *, eos: int, bos: int, chat_template: str | None
) -> None:
    """The byte-level BPE ("gpt2") vocabulary, its special ids and the optional chat template."""
    import gguf

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL for i in range(len(tokens))]
    )
    writer.add_token_merges(merges)
    writer.add_eos_token_id(eos)
    writer.add_bos_token_id(bos)
    writer.add_add_bos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)


# Per layer: llama.cpp's tensor name, Hugging Face's name, and which head count reorders its rows for rope
# ("heads" for queries, "kv_heads" for keys, None for no reordering).
_LAYER_TENSORS = (
    ("attn_norm", "input_layernorm", None),
    ("attn_q", "self_attn.q_proj", "heads"),
    ("attn_k", "self_attn.k_proj", "kv_heads"),
    ("attn_v", "self_attn.v_proj", None),
    ("attn_output", "self_attn.o_proj", None),
    ("ffn_norm", "post_attention_layernorm", None),
    ("ffn_gate", "mlp.gate_proj", None),
    ("ffn_up", "mlp.up_proj", None),
    ("ffn_down", "mlp.down_proj", None),
)


def _add_llama_tensors(
    writer, weights: dict[str, np.ndarray | Quantised], *, layers: int, heads: int, kv_heads: int
) -> None:
    """Every weight under llama.cpp's name, in llama.cpp's order; queries and keys reordered for its rope."""
    import gguf

    def put(key: str, hf_name: str, heads_for_rope: int | None = None) -> None:
        w = weights[hf_name]
        if isinstance(w, Quantised):  # random blocks: no row order to keep
            writer.add_tensor(
                key, np.ascontiguousarray(w.data, dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType(w.qtype)
            )
            return
        w = np.ascontiguousarray(w, dtype=np.float32)
        writer.add_tensor(key, rope_layout(w, heads_for_rope) if heads_for_rope else w)

    head_counts = {"heads": heads, "kv_heads": kv_heads, None: None}
    put("token_embd.weight", "model.embed_tokens.weight")
    put("output_norm.weight", "model.norm.weight")
    put("output.weight", "lm_head.weight")
    for i in range(layers):
        for gguf_name, hf_name, rope_heads in _LAYER_TENSORS:
            put(f"blk.{i}.{gguf_name}.weight", f"model.layers.{i}.{hf_name}.weight", head_counts[rope_heads])


def byte_vocab() -> list[str]:
    """The 256 byte tokens of a byte-level BPE in GPT-2's printable spelling, one merge (two
    spaces: llama.cpp wants merges) and two controls."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)] + ["ĠĠ", "<s>", "</s>"]


def random_llama(
    path: Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2, seed: int = 0
) -> Path:
    """A random tiny llama over a byte vocabulary (for checking that llama.cpp runs, not what it says)."""
    rng = np.random.default_rng(seed)
    tokens = byte_vocab()
    vocab, ffn, head_dim = len(tokens), 2 * hidden, hidden // heads

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    weights = {
        "model.embed_tokens.weight": mat(vocab, hidden),
        "model.norm.weight": np.ones(hidden, np.float32),
        "lm_head.weight": mat(vocab, hidden),
    }
    for i in range(layers):
        hf = f"model.layers.{i}."
        weights.update(
            {
                hf + "input_layernorm.weight": np.ones(hidden, np.float32),
                hf + "post_attention_layernorm.weight": np.ones(hidden, np.float32),
                hf + "self_attn.q_proj.weight": mat(hidden, hidden),
                hf + "self_attn.k_proj.weight": mat(kv_heads * head_dim, hidden),
                hf + "self_attn.v_proj.weight": mat(kv_heads * head_dim, hidden),
                hf + "self_attn.o_proj.weight": mat(hidden, hidden),
                hf + "mlp.gate_proj.weight": mat(ffn, hidden),
                hf + "mlp.up_proj.weight": mat(ffn, hidden),
                hf + "mlp.down_proj.weight": mat(hidden, ffn),
            }
        )
    return write_llama_gguf(
        path,
        weights=weights,
        hidden=hidden,
        layers=layers,
        ffn=ffn,
        heads=heads,
        kv_heads=kv_heads,
        context=256,
        tokens=tokens,
        merges=["Ġ Ġ"],
        control={257, 258},
        eos=258,
        bos=257,
    )


# The types the catalogue's files (Q4_K_M: Q4_K with Q6_K for some weights, Q4_1) and users'
# downloads hold, each on a weight of every kind of product (attention in and out, the MLP up and
# down). llama.cpp repacks them at load for this CPU's fastest kernels (AMX tiles, AVX2/AVX512
# interleaved rows) when their shape allows: rows a multiple of 32 and columns of 256 (a K-quant's
# block), as every real model's are.
SELFTEST_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K")
# Where a K-quant block keeps its f16 scale(s), which random blocks must hold small: Q4_K starts
# with d and dmin, Q6_K ends with d.
_K_SCALES = {"Q4_K": (slice(0, 4), [0.002, 0.001]), "Q6_K": (slice(-2, None), [0.002])}


def quantise(weight: np.ndarray, qtype_name: str, rng: np.random.Generator) -> Quantised:
    """``weight`` in the block type named: Q4_0, Q4_1 and Q8_0 by gguf's own quantiser; the K-quants
    (which gguf cannot write) as random blocks of the same size, their f16 scales kept small."""
    import gguf

    qtype = gguf.GGMLQuantizationType[qtype_name]
    if qtype_name not in _K_SCALES:
        return Quantised(int(qtype), gguf.quants.quantize(weight.astype(np.float32), qtype))
    rows, cols = weight.shape
    block, size = gguf.GGML_QUANT_SIZES[qtype]  # 256 weights a block
    blocks = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    where, scales = _K_SCALES[qtype_name]
    blocks[:, :, where] = np.array(scales, dtype=np.float16).view(np.uint8)
    return Quantised(int(qtype), blocks.reshape(rows, -1))


def random_quantised_llama(path: Path, *, layers: int = 2, seed: int = 0) -> Path:
    """A random llama whose products run on the kernels real models take: hidden 256, MLP 512,
    4 query heads of 64 over 2 KV heads, every weight of a layer in one of SELFTEST_TYPES (turning
    from layer to layer, so each type meets several shapes), the embeddings and output in Q8_0."""
    hidden, ffn, heads, kv_heads = 256, 512, 4, 2
    rng = np.random.default_rng(seed)
    tokens = byte_vocab()
    vocab, kv = len(tokens), kv_heads * hidden // heads

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    weights: dict[str, np.ndarray | Quantised] = {
        "model.embed_tokens.weight": quantise(mat(vocab, hidden), "Q8_0", rng),
        "model.norm.weight": np.ones(hidden, np.float32),
        "lm_head.weight": quantise(mat(vocab, hidden), "Q8_0", rng),
    }
    products = [
        ("self_attn.q_proj", hidden, hidden),
        ("self_attn.k_proj", kv, hidden),
        ("self_attn.v_proj", kv, hidden),
        ("self_attn.o_proj", hidden, hidden),
        ("mlp.gate_proj", ffn, hidden),
        ("mlp.up_proj", ffn, hidden),
        ("mlp.down_proj", hidden, ffn),
    ]
    for i in range(layers):
        hf = f"model.layers.{i}."
        weights[hf + "input_layernorm.weight"] = np.ones(hidden, np.float32)
        weights[hf + "post_attention_layernorm.weight"] = np.ones(hidden, np.float32)
        for j, (name, rows, cols) in enumerate(products):
            qtype = SELFTEST_TYPES[(i + j) % len(SELFTEST_TYPES)]
            weights[f"{hf}{name}.weight"] = quantise(mat(rows, cols), qtype, rng)
    return write_llama_gguf(
        path,
        weights=weights,
        hidden=hidden,
        layers=layers,
        ffn=ffn,
        heads=heads,
        kv_heads=kv_heads,
        context=256,
        tokens=tokens,
        merges=["Ġ Ġ"],
        control={257, 258},
        eos=258,
        bos=257,
        name="draftscope self-test",
    )
