"""A GGUF model's tokenizer built from the file's own metadata (models/gguf_tokenizer.py), without
torch: it gives llama.cpp's own token ids and text (on the real SmolLM2, and the Qwen2.5-Coder
GGUFs when cached), the same special tokens and BOS rule, the chat template the earlier transformers
conversion rendered; it is built with torch hidden; a damaged file is an error in words."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from llama_helpers import need_llama_cpp

from draftscope.engine.backends.llama.gguf_writer import random_llama
from draftscope.models import catalog
from draftscope.models.gguf_header import GgufHeaderError, read_gguf_header
from draftscope.models.gguf_tokenizer import MARK, gguf_tokenizer
from draftscope.models.resolve import ModelNotFoundError, file_digest, load_tokenizer, resolve_model

NO_TORCH = Path(__file__).parents[1] / "no_torch"  # its sitecustomize hides torch from a child interpreter
TEXTS = (
    "Hello, world! How are you today?",
    "def square(x: int) -> int:\n    return x ** 2  # squared\n\nprint(square(12))\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * 3.14159; }",
    "12345 + 678 = 13023; 1,000,000.5 and 007",
    "Unicode numbers: ½ ² ³ ٣ ४ Ⅻ ① and x²",  # " ½": one piece for GPT-2's split, two for SmolLM2's
    "naïve café — “quotes”, ‘single’, «guillemets» … ∑∫√",
    "emoji 🙂👍🏽 🇫🇷 👨‍👩‍👧 ✨",
    "中文分词测试，日本語のテキスト。한국어 문장입니다.",
    "   leading spaces\t\ttabs   \n\n\n   trailing   ",
    "\r\nwindows\r\nlines\r\n",
    "I'm sure you're right; we'LL see, it's THEIR'S",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    " a space first",
    "",
    " ",
    "\n",
    "\u00a0non-breaking\u2009thin\u200bzero-width",
    "https://example.com/path?a=1&b=two#frag",
    "a" * 200 + " " + "ab" * 100,
)
CONVERSATIONS = (
    [{"role": "user", "content": "Hi!"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
)


def llama_vocab(path: Path):
    """llama.cpp's own tokenizer for the GGUF at ``path`` (its vocabulary only, no weights)."""
    return need_llama_cpp().Llama(model_path=str(path), vocab_only=True, verbose=False)


def assert_llama_cpps_ids(tokenizer, vocab) -> None:
    """Every text of TEXTS tokenises to llama.cpp's ids (special tokens parsed, with and without the
    file's BOS/EOS rule) and those ids detokenise to llama.cpp's text."""
    for text in TEXTS:
        ids = vocab.tokenize(text.encode(), add_bos=False, special=True)
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids, text
        assert tokenizer(text)["input_ids"] == vocab.tokenize(text.encode(), add_bos=True, special=True), text
        assert tokenizer.decode(ids) == vocab.detokenize(ids, special=True).decode(), text
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (vocab.token_bos(), vocab.token_eos())


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return resolve_model("smollm2-135m").gguf_path  # fetched once into the test cache


@pytest.mark.network
def test_smollm2s_tokenizer_gives_llama_cpps_ids(smollm2):
    tokenizer = gguf_tokenizer(smollm2)
    assert_llama_cpps_ids(tokenizer, llama_vocab(smollm2))
    assert "<|im_start|>" in tokenizer.apply_chat_template(CONVERSATIONS[0], tokenize=False)


@pytest.mark.parametrize("name", ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
def test_qwen_coders_tokenizer_gives_llama_cpps_ids(name):
    entry = catalog.get(name)
    if not entry.fetched:
        pytest.skip(
            f"{name} is not in the test cache ({entry.path}); fetch it with "
            f"DRAFTSCOPE_CACHE_DIR={entry.path.parents[2]} python -m draftscope models fetch {name}"
        )
    tokenizer = gguf_tokenizer(entry.path)
    assert_llama_cpps_ids(tokenizer, llama_vocab(entry.path))
    assert tokenizer.apply_chat_template(CONVERSATIONS[1], tokenize=False).count("<|im_start|>") == 4


def earlier_conversion(path: Path):
    """The tokenizer transformers' own GGUF reader builds (it needs torch): what load_tokenizer kept before."""
    pytest.importorskip("torch", reason="the earlier conversion (transformers' own GGUF reader) needs torch")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def kept_folder(path: Path) -> Path:
    from draftscope import paths

    return paths.tokenizers_dir() / file_digest(path)[:24]


@pytest.mark.network
def test_the_template_and_tokens_are_those_of_the_earlier_conversion_but_digits_split_as_llama_cpp(smollm2, own_cache):
    earlier, ours = earlier_conversion(smollm2), gguf_tokenizer(smollm2)
    assert ours.chat_template == earlier.chat_template
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            rendered = [
                t.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt) for t in (ours, earlier)
            ]
            assert rendered[0] == rendered[1]
    assert ours.get_vocab() == earlier.get_vocab() and ours.all_special_tokens == earlier.all_special_tokens
    assert ours.pad_token == earlier.pad_token and ours.unk_token == earlier.unk_token

    # the earlier conversion split no digits off: its folder, kept before, is built again
    earlier.save_pretrained(str(kept_folder(smollm2)))
    text, llama_ids = "x ½", llama_vocab(smollm2).tokenize(b"x \xc2\xbd", add_bos=False, special=False)
    assert earlier(text, add_special_tokens=False)["input_ids"] != llama_ids
    assert load_tokenizer(resolve_model(str(smollm2)))(text, add_special_tokens=False)["input_ids"] == llama_ids
    assert (kept_folder(smollm2) / MARK).is_file()


def test_an_earlier_conversions_folder_is_built_again_then_kept(tiny, own_cache, monkeypatch):
    """The earlier conversion's folder loads through AutoTokenizer (torch wherever installed): it is replaced
    once by ours, which later loads read back without building it again."""
    from draftscope.models import gguf_tokenizer as module

    earlier = earlier_conversion(tiny)
    earlier.save_pretrained(str(kept_folder(tiny)))
    rebuilt = load_tokenizer(resolve_model(str(tiny)))
    assert (kept_folder(tiny) / MARK).is_file()
    # the same tokens, but none past the file's own (the earlier one added GPT-2's <|endoftext|> as 259 of 259)
    within = {token: i for token, i in earlier.get_vocab().items() if i < len(rebuilt)}
    assert rebuilt.get_vocab() == within and rebuilt.eos_token == earlier.eos_token == "</s>"
    monkeypatch.setattr(module, "gguf_tokenizer", lambda path: pytest.fail("rebuilt a kept tokenizer"))
    assert load_tokenizer(resolve_model(str(tiny))).get_vocab() == rebuilt.get_vocab()


CHILD = """
import importlib.util, json, sys
from draftscope.models.resolve import load_tokenizer, resolve_model
texts, messages = json.loads(sys.argv[2]), json.loads(sys.argv[3])
built = load_tokenizer(resolve_model(sys.argv[1]))
cached = load_tokenizer(resolve_model(sys.argv[1]))
print(json.dumps({
    "torch": "torch" in sys.modules or importlib.util.find_spec("torch") is not None,
    "ids": [[t(x, add_special_tokens=False)["input_ids"] for x in texts] for t in (built, cached)],
    "prompt": built.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
}))
"""


@pytest.mark.network
def test_it_is_built_and_cached_with_torch_hidden(smollm2, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(NO_TORCH), os.environ.get("PYTHONPATH", "")]),
        "DRAFTSCOPE_CACHE_DIR": str(tmp_path / "cache"),
        "DRAFTSCOPE_TORCH_TRIES": str(tmp_path / "tries.txt"),  # where our code tried `import torch`
    }
    argv = [str(smollm2), json.dumps(TEXTS), json.dumps(CONVERSATIONS[1])]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["torch"] is False  # torch was hidden, and nothing found it
    assert not (tmp_path / "tries.txt").exists()  # nor did our code try it
    vocab = llama_vocab(smollm2)
    llama_ids = [vocab.tokenize(text.encode(), add_bos=False, special=True) for text in TEXTS]
    assert child["ids"] == [llama_ids, llama_ids]  # built, and loaded back from the cache
    assert child["prompt"] == gguf_tokenizer(smollm2).apply_chat_template(
        CONVERSATIONS[1], tokenize=False, add_generation_prompt=True
    )
    assert any((tmp_path / "cache" / "tokenizers").iterdir())


def text_bytes(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<Q", len(raw)) + raw


def value_at(data: bytes, key: str, kind: int) -> int:
    """Where the value of the metadata ``key`` (of GGUF value type ``kind``) starts in ``data``."""
    entry = text_bytes(key) + struct.pack("<I", kind)
    return data.index(entry) + len(entry)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return random_llama(tmp_path_factory.mktemp("gguf-tokenizer") / "tiny.gguf")


def patched(tiny: Path, folder: Path, name: str, at: int, raw: bytes) -> Path:
    data = bytearray(tiny.read_bytes())
    data[at : at + len(raw)] = raw
    path = folder / name
    path.write_bytes(data)
    return path


def test_the_files_bos_rule_is_llama_cpps(tiny, tmp_path):
    """A file that asks for BOS gets it at the front of every encoding, as llama.cpp puts it; one
    that does not, not."""
    asks = patched(tiny, tmp_path, "bos.gguf", value_at(tiny.read_bytes(), "tokenizer.ggml.add_bos_token", 7), b"\1")
    for path, front in ((tiny, []), (asks, [257])):
        tokenizer, vocab = gguf_tokenizer(path), llama_vocab(path)
        for text in ("hello  world", "a\n\n b <s> c</s>", "12 ½"):
            ids = tokenizer(text)["input_ids"]
            assert ids == vocab.tokenize(text.encode(), add_bos=True, special=True)
            assert ids[: len(front)] == front and ids[len(front)] != 257


def damaged(tiny: Path, folder: Path, case: str) -> Path:
    data = tiny.read_bytes()
    tokens = read_gguf_header(tiny).arrays["tokenizer.ggml.tokens"]
    if case == "cut inside the vocabulary":
        (folder / "cut.gguf").write_bytes(data[: tokens.offset + 100])
        return folder / "cut.gguf"
    if case == "an absurd vocabulary length":
        return patched(tiny, folder, "long.gguf", tokens.offset - 8, struct.pack("<Q", 1 << 60))
    if case == "a token not UTF-8":  # the first token, byte 0's spelling, takes two bytes
        return patched(tiny, folder, "utf8.gguf", tokens.offset + 8, b"\xff\xfe")
    if case == "a BOS id past the vocabulary":
        at = value_at(data, "tokenizer.ggml.bos_token_id", 4)
        return patched(tiny, folder, "bos.gguf", at, struct.pack("<I", 1_000_000))
    return patched(tiny, folder, "model.gguf", value_at(data, "tokenizer.ggml.model", 8) + 8, b"xyz9")


DAMAGED = {
    "cut inside the vocabulary": "cut.gguf is a damaged GGUF: its header runs past the end of the file",
    "an absurd vocabulary length": "long.gguf is a damaged GGUF: an array longer than the file",
    "a token not UTF-8": "utf8.gguf is a damaged GGUF: item 0 of tokenizer.ggml.tokens is not UTF-8 text",
    "a BOS id past the vocabulary": "bos.gguf: tokenizer.ggml.bos_token_id is 1000000, not one of its 259 tokens",
    "an unknown tokenizer": "model.gguf: its tokenizer cannot be built .*'xyz9'",
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_tokenizer_is_an_error_in_words(tiny, tmp_path, own_cache, case):
    path = damaged(tiny, tmp_path, case)
    with pytest.raises(GgufHeaderError, match=DAMAGED[case]):
        gguf_tokenizer(path)
    with pytest.raises(ModelNotFoundError, match=f"{path} could not be read as a GGUF model: {DAMAGED[case]}"):
        load_tokenizer(resolve_model(str(path)))


def test_no_id_past_the_files_vocabulary(tokenizer, tokenizer_dir, tmp_path):
    """A file without GPT-2's ``<|endoftext|>``: the converter's default is not added as a token the model
    has no row for (it was id 400 of a 400-token model, and a datastore built for it was refused)."""
    from engine_fixtures import tiny_llama
    from gguf_fixtures import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=1), tokenizer_dir)
    ours = gguf_tokenizer(gguf)
    assert len(ours) == len(tokenizer) == 400
    text = "hello <|im_start|>user\nhi<|im_end|> <|endoftext|>"
    assert ours(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert max(ours(text)["input_ids"]) < 400
