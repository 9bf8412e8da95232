"""The window reads the prompt while the user types (issue 61), with a tiny real model (offscreen Qt).

A pause in typing, a file attached, an answer's end: the model reads the prompt Send would send
(cut before the word being typed) into its cache, and the composer says how much ("N of M tokens
read"). Send then reads only the rest, never waits for a read ahead, and answers token for token as
a cold read (fp32, greedy and seeded). Counted by what the model is fed, never by seconds.
"""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton
from runtime_helpers import runtime_for

import draftscope.engine.backends.held as held_mod
from draftscope.core.session import sampling_from
from draftscope.documents.extract import Attachment
from draftscope.engine.answer import READ_CHUNK
from draftscope.engine.backends.work import Prefill
from draftscope.engine.cache_prefix import common_prefix
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.gui.chat.read_ahead import DEBOUNCE_MS, finished_words
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore

SYSTEM = "You answer questions about caches, briefly and exactly."
TEXT = "Tell me everything about caches and how a kept prefix saves reading it again"
SEEDED = {"temperature": 0.9, "top_p": 0.95, "seed": 7}


@pytest.fixture
def engine(tokenizer):
    """A fresh tiny Llama per test (its cache holds nothing of another test's)."""
    model = tiny_llama(len(tokenizer), seed=5, layers=2, hidden=64)
    model.config.max_position_embeddings = 4096
    engine = Engine(model, tokenizer, name="tiny")
    engine.eos_ids = set()  # every answer is max_new_tokens long
    engine.measure_costs()  # as a loaded model's are (measuring later would empty the cache)
    return engine


class Fed:
    """The prompt tokens the model is given (its forwards of prompt work, by their input ids)."""

    def __init__(self, engine, slow_s: float = 0.0) -> None:
        self.tokens, self.reading = 0, False
        self._hook = engine.model.get_input_embeddings().register_forward_hook(self._count)
        decode = engine.backend.decode_many

        def counted(work):
            self.reading = all(isinstance(item, Prefill) for item in work.values())
            try:
                if self.reading:
                    time.sleep(slow_s)  # a long prompt on a slow machine
                return decode(work)
            finally:
                self.reading = False

        engine.backend.decode_many = counted

    def _count(self, module, inputs, output) -> None:
        if self.reading:
            self.tokens += int(inputs[0].numel())


def make_window(qtbot, engine, tmp_path, **fields) -> MainWindow:
    settings = {"max_new_tokens": 24, "system_prompt": SYSTEM, "read_ahead": True, **fields}
    window = MainWindow(runtime_for(engine, **settings), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    return window


def type_and_pause(qtbot, window, text: str):
    """Type ``text`` and wait for the read ahead the pause starts to read it all."""
    with qtbot.waitSignal(window.read_ahead.done, timeout=60_000):
        window.chat_input.setPlainText(text)


def send(qtbot, window):
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000) as done:
        qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.streaming, timeout=5000)
    return done.args[0]


def prompt_now(window, text: str, files=()) -> list[int]:
    """The prompt Send would send for ``text`` now."""
    return window.engine.encode_chat(window.session.outgoing(text, list(files)).messages)


def cold_answer(window, prompt: list[int]):
    """The answer of reading ``prompt`` whole (nothing kept), with the window's settings' sampling."""
    request = GenerationRequest(
        prompt_ids=prompt,
        max_new_tokens=window.settings.max_new_tokens,
        sampling=sampling_from(window.settings),
        keep_cache=False,
    )
    final = list(window.engine.generate(request))[-1]
    assert final.error is None, final.error
    return final


def label(window) -> QLabel:
    return window.findChild(QLabel, "readAheadLabel")


def test_the_text_is_cut_before_the_word_being_typed():
    assert finished_words("Tell me about cach") == "Tell me about"
    assert finished_words("Tell me about caches ") == "Tell me about caches"
    assert finished_words("  one\ntwo") == "one"
    assert finished_words("word") == finished_words("") == ""


def test_a_pause_in_typing_reads_the_prompt_and_the_composer_says_how_much(qtbot, engine, tmp_path):
    w = make_window(qtbot, engine, tmp_path)
    fed = Fed(engine)
    assert not label(w).isVisible(), "nothing read ahead yet"

    type_and_pause(qtbot, w, TEXT)

    full, held = prompt_now(w, TEXT), engine.backend.held_tokens(0)
    assert held == full[: len(held)], "the cache holds the start of the prompt Send would send"
    # left for Send: the word being typed, the last token read ahead (its answer would read it) and
    # the template's end
    typed_left = engine.tokenizer.decode(full[len(held) :]).split("<|im_end|>")[0]
    assert typed_left.endswith(" again") and len(typed_left) <= len(" again") + 3, typed_left
    assert len(held) < len(full), "the word being typed is left for Send"
    assert fed.tokens == len(held), "read once"
    qtbot.waitUntil(lambda: label(w).isVisible())
    assert label(w).text() == f"{len(held):,} of {len(full):,} tokens read"
    assert w.history.conversations() == [], "reading ahead records nothing"


@pytest.mark.parametrize("fields", [{}, SEEDED], ids=["greedy", "seeded"])
def test_send_after_a_read_ahead_reads_only_the_rest_and_answers_as_a_cold_read(qtbot, engine, tmp_path, fields):
    w = make_window(qtbot, engine, tmp_path, **fields)
    fed = Fed(engine)
    type_and_pause(qtbot, w, TEXT)
    read_ahead = len(engine.backend.held_tokens(0))
    fed.tokens = 0

    final = send(qtbot, w)

    assert final.stats.prompt_kept == read_ahead, "all that was read ahead is kept"
    # only the rest is read (the prompt's last token with the first step)
    assert fed.tokens == final.stats.prompt_tokens - final.stats.prompt_kept - 1
    assert not label(w).isVisible(), "Send's own reading shows in the transcript"
    sent = w.engine.encode_chat(w.session.messages()[:-1])
    assert cold_answer(w, sent).token_ids == final.token_ids


def test_an_edit_after_a_read_ahead_reads_from_the_edit_and_a_cache_trusted_by_length_is_caught(
    qtbot, engine, tmp_path, monkeypatch
):
    """The user pauses, then changes an earlier word: Send keeps only what the prompts share. A
    cache that kept what it holds by its length, not its tokens, answers otherwise: caught."""
    w = make_window(qtbot, engine, tmp_path)
    edited = TEXT.replace("caches", "trees")

    def answer_after_an_edit():
        engine.backend.truncate_slot(0, 0)  # nothing of before in the cache
        type_and_pause(qtbot, w, TEXT)
        w.chat_input.setPlainText(edited)
        final = send(qtbot, w)
        w.new_conversation()
        return final

    right = answer_after_an_edit()
    prompt = prompt_now(w, edited)
    shared = common_prefix(prompt_now(w, TEXT), prompt)
    assert right.stats.prompt_kept == shared, "read from the edit on"
    cold = cold_answer(w, prompt)
    assert right.token_ids == cold.token_ids

    monkeypatch.setattr(
        held_mod, "positions_to_keep", lambda held, prompt, want_hidden=False: min(len(held), len(prompt) - 1)
    )
    trusting = answer_after_an_edit()
    assert trusting.token_ids != cold.token_ids


def test_with_the_setting_off_nothing_is_read_ahead(qtbot, engine, tmp_path):
    w = make_window(qtbot, engine, tmp_path, read_ahead=False)
    fed = Fed(engine)
    w.chat_input.setPlainText(TEXT)
    w.composer.chips.add(Attachment("notes.md", "A cache keeps what was computed."))
    qtbot.wait(DEBOUNCE_MS * 3)
    assert fed.tokens == 0 and not w.read_ahead.threads and not label(w).isVisible()


def test_attaching_a_file_reads_it_before_anything_is_typed(qtbot, engine, tmp_path):
    w = make_window(qtbot, engine, tmp_path)
    notes = "A cache keeps what was computed, so the next question reads only what is new. " * 8
    with qtbot.waitSignal(w.read_ahead.done, timeout=60_000):
        w.composer.chips.add(Attachment("notes.md", notes))
    held = engine.backend.held_tokens(0)
    full = prompt_now(w, "", [Attachment("notes.md", notes)])
    assert held == full[: len(held)], "the prompt Send would send"
    assert engine.tokenizer.decode(held).count("what is new") == 8, "the file whole, in the cache"
    assert "what is new" not in engine.tokenizer.decode(full[len(held) :])


def test_send_during_a_long_read_ahead_starts_within_one_chunk(qtbot, engine, tmp_path):
    """A long file being read ahead in chunks (each slowed): Send's answer starts after at most
    the chunk in flight, and keeps what was read."""
    w = make_window(qtbot, engine, tmp_path)
    long_notes = "\n".join(f"Line {i}: the cache keeps this line of the minutes." for i in range(150))
    Fed(engine, slow_s=0.3)  # each chunk slowed: the read ahead is still reading when Send comes
    w.composer.chips.add(Attachment("minutes.txt", long_notes))
    qtbot.waitUntil(lambda: label(w).isVisible() and not label(w).text().startswith("0 of"), timeout=60_000)
    w.chat_input.setPlainText("Which line is first?")
    read = int(label(w).text().split(" of ")[0].replace(",", ""))
    chunk = READ_CHUNK

    final = send(qtbot, w)

    assert final.stats.prompt_tokens > read + 4 * chunk, "a long read ahead was under way"
    # read so far, the chunk in flight (not yet said) and at most one more planned as Send came
    assert read <= final.stats.prompt_kept <= read + 2 * chunk + 1, (read, final.stats.prompt_kept)


def test_after_an_answer_the_conversation_is_read_for_the_next_message(qtbot, engine, tmp_path):
    w = make_window(qtbot, engine, tmp_path)
    w.chat_input.setPlainText("What is a cache?")
    with qtbot.waitSignal(w.read_ahead.done, timeout=60_000):
        send(qtbot, w)
    held, next_prompt = engine.backend.held_tokens(0), prompt_now(w, "And then?")
    assert held == next_prompt[: len(held)], "the conversation so far, answer and all"
    typed_left = engine.tokenizer.decode(next_prompt[len(held) :]).split("<|im_end|>")[0]
    assert typed_left.endswith("And then?") and len(typed_left) <= len("And then?") + 3, typed_left


# ---------------------------------------------------------------------- Settings ▸ Generation


def open_settings(qtbot, settings):
    from draftscope.gui.dialogs.settings_dialog import SettingsDialog

    dialog = SettingsDialog(settings, devices=["cpu"])
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def test_the_settings_turn_reading_ahead_off_and_size_the_caches_on_disk(qtbot, own_data_and_cache):
    from dataclasses import replace

    from PySide6.QtWidgets import QCheckBox, QSpinBox

    from draftscope.storage import Settings

    kept = replace(Settings(), read_ahead=False, kv_cache_budget_mb=0)
    dialog = open_settings(qtbot, kept)
    box, budget = dialog.findChild(QCheckBox, "readAheadCheck"), dialog.findChild(QSpinBox, "kvCacheBudgetSpin")
    assert not box.isChecked() and budget.value() == 0 and budget.text() == "none"
    assert dialog.result_settings() == kept, "OK keeps them as they were"
    box.setChecked(True)
    budget.setValue(2048)
    result = dialog.result_settings()
    assert (result.read_ahead, result.kv_cache_budget_mb) == (True, 2048)


def test_the_settings_say_what_the_caches_take_on_disk_and_clear_them(qtbot, own_data_and_cache):
    from draftscope import paths
    from draftscope.engine import kv_disk
    from draftscope.storage import Settings

    folder = paths.kv_cache_dir()
    for name in ("a", "b"):
        (folder / f"{name}{kv_disk.SUFFIX}").write_bytes(b"\0" * 3_000_000)
    (folder / "notes.txt").write_text("not a cache: left alone")
    dialog = open_settings(qtbot, Settings())
    use, clear = dialog.findChild(QLabel, "kvCacheUse"), dialog.findChild(QPushButton, "clearKvCachesButton")
    assert use.text() == "6 MB kept now" and clear.isEnabled()

    qtbot.mouseClick(clear, Qt.MouseButton.LeftButton)

    assert kv_disk.cache_files(folder) == [] and (folder / "notes.txt").exists()
    assert use.text() == "none kept now" and not clear.isEnabled()


def test_opening_another_conversation_reads_it_and_no_longer_shows_the_last(qtbot, engine, tmp_path):
    w = make_window(qtbot, engine, tmp_path)
    w.chat_input.setPlainText("What is a cache?")
    send(qtbot, w)
    first = w.conversation_id
    w.new_conversation()
    type_and_pause(qtbot, w, TEXT)
    assert label(w).isVisible()

    with qtbot.waitSignal(w.read_ahead.done, timeout=60_000):
        w.conversations.chosen.emit(first)
        assert not label(w).isVisible(), "the other conversation's figure goes at once"
    held = engine.backend.held_tokens(0)
    assert held == prompt_now(w, TEXT)[: len(held)] and w.conversation_id == first
    assert engine.tokenizer.decode(held).count("What is a cache?") == 1, "the opened conversation, read"
