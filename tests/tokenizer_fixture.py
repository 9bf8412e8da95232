"""A tiny real fast tokenizer (byte-level BPE trained in the test) with a ChatML template, saved
as a Hugging Face folder so every entry point (API, CLI, --model FOLDER) can load it."""

from pathlib import Path

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TRAINING_TEXT = [
    "def main():\n    print('hello world')\n    return 0\n",
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens and verifies them.",
    "Hello there! How can I help you today? Here is an answer with code: `x = 1`.",
    "import os\nimport sys\n\nclass Thing:\n    pass\n",
] * 20


def make_tokenizer_folder(folder: Path, *, extra_text: tuple[str, ...] = ()) -> Path:
    """``extra_text``: more training text (repeated as the rest is), for a test that needs its tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAINING_TEXT + list(extra_text) * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    fast.chat_template = CHATML
    fast.save_pretrained(str(folder))
    return folder
