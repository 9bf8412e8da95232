"""A tiny GGUF written at test time: the random llama of engine_fixtures and the byte-level BPE of
tokenizer_fixture, in llama.cpp's layout, so the llama.cpp backend is tested without downloads
and against the very model torch runs (same weights, same tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

from draftscope.engine.backends.llama.gguf_writer import write_llama_gguf


def write_tiny_gguf(path: Path, model, tokenizer_folder: Path, *, name: str = "tiny") -> Path:
    """``model``: a transformers LlamaForCausalLM (fp32); ``tokenizer_folder``: a saved byte-level BPE
    tokenizer whose vocabulary matches the model's."""
    cfg = model.config
    folder = Path(tokenizer_folder)
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab: dict[str, int] = dict(spec["model"]["vocab"])
    for added in spec.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * len(vocab)
    for text, idx in vocab.items():
        tokens[idx] = text
    config = json.loads((folder / "tokenizer_config.json").read_text())
    template = folder / "chat_template.jinja"  # where newer transformers save it
    rope = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return write_llama_gguf(
        path,
        weights={k: v.detach().float().numpy() for k, v in model.state_dict().items()},
        hidden=cfg.hidden_size,
        layers=cfg.num_hidden_layers,
        ffn=cfg.intermediate_size,
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        context=cfg.max_position_embeddings,
        tokens=tokens,
        merges=[m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]],
        control={a["id"] for a in spec.get("added_tokens", []) if a.get("special")},
        eos=vocab[config["eos_token"]],
        bos=vocab[config["bos_token"]],
        rms_eps=cfg.rms_norm_eps,
        rope_theta=rope,
        chat_template=config.get("chat_template") or (template.read_text() if template.is_file() else None),
        name=name,
    )
