"""A datastore followed on disk between answers: rebuilt or copied over, it is reopened (and checked
against the model) with a notice; unreadable for now, answers go on from the copy in memory or
without it; a datastore made with another tokenizer is refused naming both fingerprints."""

import os
import shutil

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from engine_fixtures import tiny_llama

from draftscope.core.drafter_factory import setup_drafters
from draftscope.datastore.fingerprint import tokenizer_fingerprint
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.retrieval import Reader, Writer
from draftscope.retrieval.live import LiveReader


def build(path, docs, vocab, fingerprint=""):
    w = Writer(path, vocab, fingerprint)
    w.add_entries(docs)
    w.finalize()
    return path


def test_a_rebuilt_datastore_is_reopened_and_said_once(tmp_path):
    path = build(tmp_path / "chat.idx", [[1, 2, 3, 4]] * 3, 50)
    live = LiveReader(str(path))
    first, notice = live.current()
    assert notice is None and first.search([1, 2]).tokens.tolist()[:1] == [3]
    build(tmp_path / "new.idx", [[1, 2, 9, 9]] * 4, 50)
    os.replace(tmp_path / "new.idx", path)
    second, notice = live.current()
    assert second is not first and second.search([1, 2]).tokens.tolist()[:1] == [9]
    assert notice == "datastore chat.idx changed on disk: reopened (4 documents)"
    assert live.current() == (second, None)


def test_a_copy_under_way_keeps_the_copy_in_memory_then_switches(tmp_path):
    path = build(tmp_path / "chat.idx", [[1, 2, 3, 4]] * 3, 50)
    other = build(tmp_path / "other.idx", [[1, 2, 7, 7]] * 5, 50)
    live = LiveReader(str(path))
    old, _ = live.current()
    data = other.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # cp caught half way
    reader, notice = live.current()
    assert reader is old and reader.search([1, 2]).tokens.tolist()[:1] == [3]
    assert "chat.idx changed on disk and cannot be used" in notice and "truncated" in notice
    assert "drafting from the copy opened before" in notice
    assert live.current() == (old, None), "the same problem is said once"
    shutil.copyfile(other, path)  # the copy finished
    reader, notice = live.current()
    assert reader.search([1, 2]).tokens.tolist()[:1] == [7] and "reopened (5 documents)" in notice


def test_a_mapped_datastore_that_cannot_be_reopened_is_left_out(tmp_path):
    path = build(tmp_path / "chat.idx", [[1, 2, 3, 4]] * 3, 50)
    live = LiveReader(Reader(path, in_memory=False))
    path.write_bytes(b"not an index")
    reader, notice = live.current()
    assert reader is None and "retrieval drafts are off until it can" in notice and "bad magic" in notice


def test_a_datastore_copied_in_for_another_tokenizer_is_refused_on_reopen(tmp_path, tokenizer):
    path = build(tmp_path / "chat.idx", [[1, 2, 3, 4]] * 3, len(tokenizer), tokenizer_fingerprint(tokenizer))
    setup = setup_drafters(
        {"retrieval": True, "context": False},
        datastore=path,
        vocab_size=len(tokenizer),
        tokenizer=tokenizer,
        notify=(heard := []).append,
    )
    assert [d.name for d in setup.make()] == ["retrieval"] and not heard
    build(tmp_path / "foreign.idx", [[1, 2, 3]], len(tokenizer), "vocab-sha256:" + "0" * 32)
    os.replace(tmp_path / "foreign.idx", path)
    assert [d.name for d in setup.make()] == ["retrieval"], "the copy in memory still drafts"
    assert "was built with another tokenizer" in heard[0] and "vocab-sha256:" + "0" * 32 in heard[0]


def test_another_tokenizer_is_named_when_the_datastore_is_paired_with_the_model(tmp_path, tokenizer):
    path = build(tmp_path / "chat.idx", [[1, 2, 3]], len(tokenizer), "vocab-sha256:" + "0" * 32)
    setup = setup_drafters(
        {"retrieval": True, "context": True}, datastore=path, vocab_size=len(tokenizer), tokenizer=tokenizer
    )
    assert setup.names == ["context"]
    (note,) = setup.notes
    assert "chat.idx was built with another tokenizer" in note and tokenizer_fingerprint(tokenizer) in note
    with pytest.raises(ValueError, match="built with another tokenizer"):
        setup_drafters("retrieval", datastore=path, vocab_size=len(tokenizer), tokenizer=tokenizer)
    # Same ids: accepted; no fingerprint recorded (REST-made indexes): the size check alone.
    for fp in (tokenizer_fingerprint(tokenizer), ""):
        build(path, [[1, 2, 3]], len(tokenizer), fp)
        assert setup_drafters("retrieval", datastore=path, vocab_size=len(tokenizer), tokenizer=tokenizer).names == [
            "retrieval"
        ]


def test_answers_go_on_while_the_datastore_is_copied_over_between_and_during_them(tmp_path, tokenizer):
    vocab = len(tokenizer)
    model = tiny_llama(vocab, seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = Engine(model, tokenizer, name="tiny")
    prompt = tokenizer("one two three one two three one two three")["input_ids"]
    plain = list(engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=24)))[-1].token_ids
    docs = [plain[i:] for i in range(0, 12, 2)]
    path = build(tmp_path / "chat.idx", docs, vocab)
    build(tmp_path / "other.idx", [list(reversed(d)) for d in docs] * 3, vocab)
    heard = []
    setup = setup_drafters("retrieval", datastore=path, vocab_size=vocab, tokenizer=tokenizer, notify=heard.append)
    outputs = []
    for answer in range(3):
        events = []
        for ev in engine.generate(
            GenerationRequest(prompt_ids=prompt, max_new_tokens=24, drafters=setup.make(), budget=8)
        ):
            events.append(ev)
            if answer == 1 and len(events) == 2:
                shutil.copyfile(tmp_path / "other.idx", path)  # copied over in the middle of an answer
        outputs.append(events[-1])
    assert all(out.token_ids == plain for out in outputs), "greedy output never depends on the datastore"
    assert outputs[0].stats.accepted_by_source.get("retrieval", 0) > 0
    assert heard == ["datastore chat.idx changed on disk: reopened (18 documents)"], "said before the third answer"


def test_the_window_says_when_the_datastore_changed_on_disk(qtbot, tmp_path, tokenizer):
    pytest.importorskip("PySide6")
    from draftscope.core.runtime import Runtime
    from draftscope.gui.main_window import MainWindow
    from draftscope.storage import HistoryStore, Settings

    vocab = len(tokenizer)
    engine = Engine(tiny_llama(vocab, seed=3, layers=2, hidden=64), tokenizer, name="tiny")
    path = build(tmp_path / "chat.idx", [[5, 6, 7, 8]] * 3, vocab, tokenizer_fingerprint(tokenizer))
    settings = Settings(datastore=str(path), max_new_tokens=8)
    window = MainWindow(Runtime(settings, engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    build(tmp_path / "new.idx", [[5, 6, 9, 9]] * 7, vocab, tokenizer_fingerprint(tokenizer))
    os.replace(tmp_path / "new.idx", path)
    window.chat_input.setPlainText("hello there")
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
        window.send()
    assert window.statusBar().currentMessage() == "datastore chat.idx changed on disk: reopened (7 documents)"
    qtbot.waitUntil(lambda: not window.streaming, timeout=5000)
    assert window.history.messages(window.conversation_id)[-1].role == "assistant", "the answer was given"


def test_a_mapped_datastore_renamed_over_keeps_drafting_from_the_file_it_opened(tmp_path):
    path = build(tmp_path / "chat.idx", [[1, 2, 3, 4]] * 3, 50)
    live = LiveReader(Reader(path, in_memory=False))
    (tmp_path / "junk.idx").write_bytes(b"junk")
    os.replace(tmp_path / "junk.idx", path)  # the open file is untouched, only unlinked
    reader, notice = live.current()
    assert reader is not None and reader.search([1, 2]).tokens.tolist()[:1] == [3]
    assert "drafting from the copy opened before" in notice
