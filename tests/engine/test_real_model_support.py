"""What real models need: draft models refused when their tokenizer differs (with the reason),
the app's settings building a model drafter, the dtype choice and its override, the transposed
linear layout, and a Qwen2-sized vocabulary (151,936 ids: 32-bit datastore tokens) through
datastore, engine and the draft tree's labels."""

import os
import shutil

import pytest
import torch
from engine_fixtures import tiny_llama

from draftscope.core.drafter_factory import setup_drafters
from draftscope.drafters.draft_model import draft_incompatibility, load_draft_model
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine.backends.pytorch import cpu_linear, precision
from draftscope.engine.backends.pytorch.loader import load_model
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent
from draftscope.models.resolve import resolve_model
from draftscope.storage import Settings, load_settings


def model_folder(path, tokenizer_dir, vocab, seed):
    shutil.copytree(tokenizer_dir, path)
    tiny_llama(vocab, seed=seed).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer_dir, tokenizer):
    """A target and a draft model sharing a tokenizer, and a model with another tokenizer."""
    from tokenizer_fixture import TRAINING_TEXT  # noqa: F401  (same corpus, other vocabulary size below)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("models")
    target = model_folder(root / "target", tokenizer_dir, len(tokenizer), 1)
    draft = model_folder(root / "draft", tokenizer_dir, len(tokenizer), 2)
    other_tok = Tokenizer(
        models.WordLevel({"<unk>": 0, "<|im_end|>": 1, **{f"w{i}": i for i in range(2, 50)}}, unk_token="<unk>")
    )
    other_tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    other = root / "other"
    PreTrainedTokenizerFast(tokenizer_object=other_tok, unk_token="<unk>", eos_token="<|im_end|>").save_pretrained(
        other
    )
    tiny_llama(50, seed=3).save_pretrained(other)
    return {"target": target, "draft": draft, "other": other}


def test_a_draft_model_with_another_tokenizer_is_refused_with_the_reason(folders):
    target = load_model(resolve_model(str(folders["target"])), dtype="float32")
    with pytest.raises(ValueError) as info:
        load_draft_model(str(folders["other"]), target)
    message = str(info.value)
    assert (
        "cannot be a draft model here" in message and "50 tokens" in message and f"{len(target.tokenizer):,}" in message
    )
    ok = load_draft_model(str(folders["draft"]), target)
    assert ok.dtype == target.dtype and draft_incompatibility(target.tokenizer, ok.tokenizer) is None


def test_the_app_builds_a_model_drafter_from_its_settings(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    from draftscope.core.runtime import load_runtime

    settings = Settings(
        model=str(folders["target"]),
        draft_model=str(folders["draft"]),
        drafters={"retrieval": True, "context": True, "model": True},
        dtype="float32",
    )
    runtime = load_runtime(settings)
    assert runtime.draft_model is not None and runtime.notices == []
    drafters = runtime.make_drafters()
    assert [d.name for d in drafters] == ["context", "model"] and isinstance(drafters[1], ModelDrafter)
    setup = runtime.drafter_setup
    assert setup.label == "none" and any("no datastore" in n for n in setup.notes)
    final = list(
        runtime.engine.generate(GenerationRequest(prompt_ids=[5, 6, 7], max_new_tokens=12, drafters=drafters))
    )[-1]
    assert final.finish_reason in ("length", "eos") and final.stats.accepted_by_source is not None
    # a draft model that cannot draft for this model: the model loads, the notice says why
    bad = load_runtime(
        Settings(
            model=str(folders["target"]),
            draft_model=str(folders["other"]),
            drafters={"retrieval": False, "context": True, "model": True},
        )
    )
    assert bad.draft_model is None and "Draft model not used" in bad.notices[0] and "tokens" in bad.notices[0]
    assert [d.name for d in bad.make_drafters()] == ["context"]
    assert any("model drafts are off: no usable draft model" in n for n in bad.drafter_setup.notes)
    # on the command line, a draft model that cannot be used is an error naming why
    with pytest.raises(ValueError, match="tokens"):
        load_runtime(
            Settings(
                model=str(folders["target"]),
                draft_model=str(folders["other"]),
                drafters={"retrieval": False, "context": True, "model": True},
            ),
            strict=True,
        )
    # switched off in the settings: no draft model is loaded at all
    assert load_runtime(Settings(model=str(folders["target"]), draft_model=str(folders["draft"]))).draft_model is None


def test_a_datastore_for_another_tokenizer_is_not_used(tmp_path, tokenizer):
    from draftscope.datastore.pipeline import build_datastore
    from draftscope.datastore.sources import Source

    text = tmp_path / "corpus.txt"
    text.write_text("def main():\n    print('hello world')\n" * 20)
    index = build_datastore([Source.parse(f"text:{text}")], tokenizer, tmp_path / "t.idx").path
    switches = {"retrieval": True, "context": True, "model": False}
    assert setup_drafters(switches, datastore=index, vocab_size=len(tokenizer)).names == ["retrieval", "context"]
    smaller = setup_drafters(switches, datastore=index, vocab_size=50)
    assert smaller.names == ["context"] and smaller.label == "none"
    assert any("built for a tokenizer of" in n and "the model has 50" in n for n in smaller.notes)
    with pytest.raises(ValueError, match="built for a tokenizer of"):
        setup_drafters("retrieval,context", datastore=index, vocab_size=50)


def test_setup_drafters_from_a_list_refuses_what_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="needs a draft model"):
        setup_drafters("context,model", datastore=None)
    with pytest.raises(ValueError, match="needs a datastore"):
        setup_drafters("retrieval", datastore=None)
    assert setup_drafters("auto", datastore=tmp_path / "missing.idx").names == ["context"]


def test_dtype_follows_the_cpus_bf16_support_and_the_user_can_override(monkeypatch, tmp_path):
    cpu = torch.device("cpu")
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: (True, "AMX-BF16"))
    chosen = precision.choose(cpu)
    assert chosen.dtype == torch.bfloat16 and "AMX-BF16" in chosen.reason
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: (False, "no AVX512-BF16 or AMX"))
    chosen = precision.choose(cpu)
    assert chosen.dtype == torch.float32 and "emulated" in chosen.reason
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: (None, "unknown"))
    monkeypatch.setattr(precision, "bf16_speed_ratio", lambda: 2.0)
    assert precision.choose(cpu).dtype == torch.bfloat16 and "measured" in precision.choose(cpu).reason
    monkeypatch.setattr(precision, "bf16_speed_ratio", lambda: 0.05)
    assert precision.choose(cpu).dtype == torch.float32
    assert precision.choose(cpu, "bfloat16") == precision.Precision(
        torch.bfloat16, "as asked (Settings ▸ Model, or --dtype)"
    )
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        precision.choose(cpu, "float8")
    # a bad value in the settings file falls back to auto with a notice
    path = tmp_path / "settings.json"
    path.write_text('{"version": 1, "dtype": "float8"}')
    settings, notices = load_settings(path)
    assert settings.dtype == "auto" and any("dtype" in n for n in notices)


def test_a_loaded_model_says_its_dtype_and_why(folders):
    loaded = load_model(resolve_model(str(folders["target"])), dtype="bfloat16")
    assert loaded.dtype == torch.bfloat16 and next(loaded.model.parameters()).dtype == torch.bfloat16
    assert loaded.dtype_reason.startswith("as asked (Settings ▸ Model, or --dtype)")


def test_the_transposed_linear_layout_computes_the_same(monkeypatch):
    torch.manual_seed(0)
    model = tiny_llama(64, hidden=32)
    x = torch.randint(0, 64, (1, 7))
    with torch.no_grad():
        before = model(x).logits
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert cpu_linear._probe(model, linears) > 0
    assert not any("forward" in m.__dict__ for m in linears), "the probe leaves the usual layout in place"
    monkeypatch.setattr(cpu_linear, "_probe", lambda model, linears: 1.0)
    assert cpu_linear.use_fast_layout(model).startswith("linear layers as usual")
    monkeypatch.setattr(cpu_linear, "_probe", lambda model, linears: 3.0)
    assert "transposed" in cpu_linear.use_fast_layout(model)
    with torch.no_grad():
        after = model(x).logits
    assert torch.allclose(before, after, atol=1e-5)
    layer = torch.nn.Linear(5, 3)
    layer.forward = cpu_linear._transposed_forward.__get__(layer)
    inp = torch.randn(2, 4, 5)
    assert torch.allclose(layer(inp), torch.nn.functional.linear(inp, layer.weight, layer.bias), atol=1e-6)


QWEN_VOCAB = 151_936


@pytest.fixture(scope="module")
def qwen_sized(tmp_path_factory):
    """A tokenizer with 151,936 ids (words w0..w151935) and a tiny random Qwen2 over it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<unk>": 0, "<|im_end|>": 1, **{f"w{i}": i for i in range(2, QWEN_VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>")
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        eos_token_id=1,
        tie_word_embeddings=True,
    )
    return fast, Qwen2ForCausalLM(cfg).eval()


def test_a_qwen_sized_vocabulary_goes_through_datastore_engine_and_tree_labels(qwen_sized, tmp_path):
    from draftscope.datastore.pipeline import build_datastore
    from draftscope.datastore.sources import Source
    from draftscope.drafters.retrieval import RetrievalDrafter
    from draftscope.retrieval import Reader

    tokenizer, model = qwen_sized
    high = [f"w{i}" for i in (70_001, 151_935, 99_999, 65_536, 123_456, 80_000, 140_000, 66_000)]
    text = tmp_path / "corpus.txt"
    text.write_text((" ".join(high) + "\n") * 50)
    report = build_datastore([Source.parse(f"text:{text}")], tokenizer, tmp_path / "q.idx")
    reader = Reader(str(report.path))
    assert reader.token_width == 4, "ids above 65,535 need 32-bit tokens"
    ids = tokenizer.convert_tokens_to_ids(high)
    engine = Engine(model, tokenizer, name="tiny-qwen2")
    events = list(
        engine.generate(
            GenerationRequest(prompt_ids=ids[:3], max_new_tokens=10, drafters=[RetrievalDrafter(reader)], budget=8)
        )
    )
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.finish_reason in ("length", "eos")
    drafted = {t for e in events[:-1] for t in e.tree.tokens}
    assert {99_999, 65_536} <= drafted, "the retrieval drafter proposes the corpus continuation, high ids intact"
    plain = model.generate(torch.tensor([ids[:3]]), max_new_tokens=10, do_sample=False, pad_token_id=1)[0, 3:].tolist()
    assert final.token_ids == plain[: len(final.token_ids)]

    pytest.importorskip("PySide6")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from draftscope.gui.panels.trie_view import TrieView

    QApplication.instance() or QApplication([])
    view = TrieView(lambda token_id: tokenizer.decode([token_id]))
    view.set_steps([e for e in events[:-1]])
    view.select_step(0)
    labels = {item.label for item in view.node_items().values()}
    assert "w99999" in labels or "w65536" in labels, labels
