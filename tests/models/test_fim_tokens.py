"""A model's fill-in-the-middle tokens (models/fim_tokens.py): found by their spelling in the tokenizer for
each family (Qwen Coder, StarCoder, Code Llama, DeepSeek Coder), taken from a GGUF's metadata first where
the file names them, and made into the prompt the model was trained on: prefix marker, the code before,
suffix marker, the code after, middle marker. A model without them is refused in words."""

import gguf
import pytest
from transformers import AutoTokenizer

from draftscope.models.fim_tokens import FAMILIES, NoFillInTheMiddle, fim_tokens, gguf_file, past_the_middle
from draftscope.models.resolve import ModelSource

QWEN = FAMILIES[0]
BEFORE, AFTER = "def main():\n    ", "\n    return 0\n"


def with_tokens(tokenizer_dir, tokens):
    """A fresh copy of the tiny test tokenizer with ``tokens`` added as special tokens."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": list(tokens)})
    return tokenizer


def family_tokens(family):
    return (family.prefix, family.suffix, family.middle, *family.ends)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_each_familys_markers_are_found_by_their_spelling(tokenizer_dir, family):
    tokenizer = with_tokens(tokenizer_dir, family_tokens(family))
    fim = fim_tokens(tokenizer)
    assert [tokenizer.convert_ids_to_tokens(t) for t in (fim.prefix, fim.suffix, fim.middle)] == [
        family.prefix,
        family.suffix,
        family.middle,
    ]
    assert {tokenizer.convert_ids_to_tokens(t) for t in fim.ends} == set(family_tokens(family))
    assert fim.family == family.name


def test_the_prompt_is_prefix_suffix_middle_without_a_chat_template(tokenizer_dir):
    tokenizer = with_tokens(tokenizer_dir, family_tokens(QWEN))
    fim = fim_tokens(tokenizer)
    ids = fim.prompt(tokenizer, BEFORE, AFTER)
    code = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert ids == [fim.prefix, *code(BEFORE), fim.suffix, *code(AFTER), fim.middle]
    assert tokenizer.decode(ids) == f"<|fim_prefix|>{BEFORE}<|fim_suffix|>{AFTER}<|fim_middle|>"
    assert "<|im_start|>" not in tokenizer.decode(ids), "no chat template"
    assert fim.prompt(tokenizer, "", AFTER)[:2] == [fim.prefix, fim.suffix], "a middle may begin the file"


def test_a_tokenizer_that_adds_a_bos_puts_it_first(tokenizer_dir):
    from tokenizers.processors import TemplateProcessing

    tokenizer = with_tokens(tokenizer_dir, family_tokens(QWEN))
    bos = tokenizer.bos_token_id
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{tokenizer.bos_token} $A", special_tokens=[(tokenizer.bos_token, bos)]
    )
    fim = fim_tokens(tokenizer)
    assert fim.prompt(tokenizer, BEFORE, AFTER)[:2] == [bos, fim.prefix]


def test_a_model_without_them_is_refused_in_words(tokenizer):
    with pytest.raises(NoFillInTheMiddle, match="no fill-in-the-middle tokens"):
        fim_tokens(tokenizer)
    half = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    half.add_special_tokens({"additional_special_tokens": ["<|fim_prefix|>", "<|fim_suffix|>"]})
    with pytest.raises(NoFillInTheMiddle):
        fim_tokens(half)  # two of three markers are no FIM format


def metadata_gguf(path, **ids):
    """A GGUF holding metadata only: ``ids`` as llama.cpp's tokenizer.ggml.<name> keys."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, value in ids.items():
        writer.add_int32(f"tokenizer.ggml.{name}", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_ggufs_own_ids_come_first(tokenizer_dir, tmp_path):
    tokenizer = with_tokens(tokenizer_dir, family_tokens(QWEN))
    spelled = fim_tokens(tokenizer)
    named = metadata_gguf(tmp_path / "named.gguf", fim_pre_token_id=11, fim_suf_token_id=12, fim_mid_token_id=13,
                          fim_sep_token_id=14)  # fmt: skip
    fim = fim_tokens(tokenizer, named)
    assert (fim.prefix, fim.suffix, fim.middle, fim.family) == (11, 12, 13, "GGUF")
    assert {11, 12, 13, 14} | spelled.ends <= fim.ends, "the file's ends and the family's"
    older = metadata_gguf(tmp_path / "older.gguf", prefix_token_id=21, suffix_token_id=22, middle_token_id=23)
    assert fim_tokens(tokenizer, older).prefix == 21, "llama.cpp's older names are read too"
    beyond = metadata_gguf(tmp_path / "beyond.gguf", fim_pre_token_id=10**6, fim_suf_token_id=1, fim_mid_token_id=2)
    unset = metadata_gguf(tmp_path / "unset.gguf", fim_pre_token_id=-1, fim_suf_token_id=-1, fim_mid_token_id=-1)
    for path in (beyond, unset, tmp_path / "missing.gguf"):
        assert fim_tokens(tokenizer, path) == spelled, f"{path.name}: the tokenizer's spelling decides"


def test_a_backends_source_names_its_gguf(tmp_path):
    path = tmp_path / "m.gguf"
    assert gguf_file(ModelSource("gguf", str(path), "m")) == path
    assert gguf_file(ModelSource("folder", str(tmp_path), "m")) is None
    assert gguf_file(None) is None


def test_the_tokens_past_the_middle_are_the_familys_ends_and_none_elsewhere(tokenizer_dir, tokenizer):
    qwen = with_tokens(tokenizer_dir, family_tokens(QWEN))
    assert {qwen.convert_ids_to_tokens(t) for t in past_the_middle(qwen)} == set(QWEN.ends)
    assert past_the_middle(tokenizer) == frozenset()
