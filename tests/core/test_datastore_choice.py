"""A datastore chosen in the settings drafts for the models that share its tokenizer: a model with
another tokenizer keeps its own default datastore, and a note says why (real indexes, a tiny real
model)."""

from __future__ import annotations

from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.datastore.default import default_datastore_path
from draftscope.datastore.fingerprint import tokenizer_fingerprint
from draftscope.engine.engine import Engine
from draftscope.retrieval import Writer

RETRIEVAL = {"retrieval": True, "learned": False, "context": True, "model": False, "recurrent": False}
OTHER = "vocab-sha256:" + "0" * 32  # a tokenizer whose ids mean other text


def build(path, vocab: int, fingerprint: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    w = Writer(path, vocab, fingerprint)
    w.add_entries([[1, 2, 3, 4]] * 3)
    w.finalize()
    return path


def test_a_model_with_another_tokenizer_keeps_its_default_datastore_and_says_why(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    engine = Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")
    own = build(default_datastore_path("tiny-model"), len(tokenizer), tokenizer_fingerprint(tokenizer))
    theirs = build(tmp_path / "built-for-qwen.idx", len(tokenizer), OTHER)
    runtime = runtime_for(engine, model="tiny-model", datastore=str(theirs))
    runtime.settings.drafters = dict(RETRIEVAL)
    setup = runtime.drafter_setup
    assert setup.label == str(own) and "retrieval" in setup.names
    assert setup.notes[0] == (
        "built-for-qwen.idx is not used with this model: it was built with another tokenizer; "
        "drafting from its own default datastore"
    )


def test_a_model_with_the_same_tokenizer_drafts_from_the_chosen_datastore(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    engine = Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")
    build(default_datastore_path("tiny-model"), len(tokenizer), tokenizer_fingerprint(tokenizer))
    mine = build(tmp_path / "mine.idx", len(tokenizer), tokenizer_fingerprint(tokenizer))
    runtime = runtime_for(engine, model="tiny-model", datastore=str(mine))
    runtime.settings.drafters = dict(RETRIEVAL)
    assert runtime.drafter_setup.label == str(mine) and runtime.drafter_setup.notes == []
