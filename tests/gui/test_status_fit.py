"""The status bar shows what matters first and cuts nothing mid-word at the usual window widths, the
busy hint and why drafting is off, and the one tokens/s every face shows."""

import re
from types import SimpleNamespace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

from draftscope.gui.status_bar import StatusLine


class _Backend:
    kind = "llama.cpp"
    offload = None

    def brief(self):
        return "llama.cpp · Q4_K_M"

    def describe(self):
        return "llama.cpp 0.3 (CPU)"


def full_status(qtbot, width: int):
    """A window ``width`` pixels wide whose status bar has every item at its longest, as a user of
    Qwen2.5-Coder-1.5B with the default datastore, learned answers and the server on sees it."""
    from draftscope.gui.theme import apply_theme
    from draftscope.storage import Settings

    apply_theme(QApplication.instance(), "light", Settings().font_size)  # the app's own font
    engine = SimpleNamespace(
        name="Qwen2.5-Coder-1.5B-Instruct",
        backend=_Backend(),
        device="cpu",
        precision="Q4_K_M",
        dtype_reason="",
    )
    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusLine(window.statusBar(), engine)
    status.show_datastore("/home/someone/.local/share/draftscope/datastores/qwen2.5-coder-1.5b-instruct.chat.idx")
    status.show_drafters(["retrieval", "learned", "context", "model"])
    status.show_learned("learned: 120 answers", "learned: 120 answers (2,400 tokens)")
    status.show_baseline(27.43)
    status.show_rate(31.2, 1.84)
    status.show_server("http://127.0.0.1:8911/v1")
    window.resize(width, 600)
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(20)
    return window, status


def assert_nothing_cut(status):
    for label in status.shown():
        assert label.width() >= label.sizeHint().width(), (label.objectName(), label.text(), label.width())
        assert (
            label.fontMetrics().elidedText(label.text(), Qt.TextElideMode.ElideRight, label.contentsRect().width())
            == label.text()
        )
        assert label.geometry().right() <= status.bar.width(), label.objectName()
    shown = status.shown()
    assert shown == status.order[: len(shown)] or set(shown) <= set(status.order), "shown in the order of what matters"


@pytest.mark.parametrize("width", [1280, 1366])
def test_at_1280_and_1366_pixels_no_status_item_is_cut(qtbot, width):
    _, status = full_status(qtbot, width)
    assert_nothing_cut(status)
    shown = status.shown()
    for label in (status.rate, status.baseline, status.drafters, status.model, status.device):
        assert label in shown, f"{label.objectName()} hidden at {width} px"


def test_a_narrow_window_hides_the_least_important_items_whole(qtbot):
    window, status = full_status(qtbot, 1366)
    wide = status.shown()
    window.resize(720, 600)
    qtbot.waitUntil(lambda: len(status.shown()) < len(wide), timeout=3000)
    qtbot.wait(50)  # the bar lays the items out again
    assert_nothing_cut(status)
    shown = status.shown()
    assert shown[0] is status.rate and status.server not in shown and status.datastore not in shown
    kept = [label for label in status.order if status.wanted[label]]
    assert shown == kept[: len(shown)], "the last in importance go first"
    window.resize(1366, 600)
    qtbot.waitUntil(lambda: status.shown() == wide, timeout=3000)


def test_the_busy_hint_and_the_drafting_note_show_in_the_status_bar(qtbot):
    from draftscope.core.words import BUSY_NOW
    from draftscope.engine.events import StepEvent, StepTree
    from draftscope.engine.policy import PAUSED_NOTE

    _, status = full_status(qtbot, 1366)
    assert status.busy not in status.shown()
    step = StepEvent(
        **dict(step=9, token_ids=[1], pieces=["a"], provenance=["target"], tree=StepTree(), accepted_path=[]),
        **dict(proposed=0, accepted=0, draft_ms=0.0, verify_ms=300.0, total_ms=300.0, tokens_total=9, steps_total=9),
        **dict(tau=1.0, tokens_per_second=3.0, speedup_estimate=0.1, decode_tokens_per_second=3.3),
        **dict(plain_tokens_per_second=31.0, busy=True, drafting=PAUSED_NOTE),
    )
    status.show_step(step)
    qtbot.wait(20)
    assert status.busy in status.shown() and status.busy.text() == BUSY_NOW
    assert status.drafters.text() == "drafting paused" and PAUSED_NOTE[1:] in status.drafters.toolTip()
    assert status.rate.text().startswith("3.3 tokens/s") and status.baseline.text() == "plain: 31.0 tokens/s"
    assert_nothing_cut(status)
    status.show_step(StepEvent(**{**step.__dict__, "busy": False, "drafting": None}))
    qtbot.wait(20)
    assert status.busy not in status.shown() and status.drafters.text() == "drafts: retrieval, learned, context, model"


def test_the_answer_line_the_speedup_panel_and_the_status_bar_show_one_tokens_per_second(qtbot, chat_engine):
    from draftscope.core.session import answer_record
    from draftscope.core.words import answer_stats
    from draftscope.drafters import ContextDrafter
    from draftscope.engine.engine import GenerationRequest
    from draftscope.engine.events import StepEvent
    from draftscope.gui.panels.speedup import SpeedupPanel

    chat_engine.measure_baseline(8)
    prompt = chat_engine.encode_chat([{"role": "user", "content": "one two three one two three"}])
    *events, final = chat_engine.generate(
        GenerationRequest(prompt_ids=prompt, max_new_tokens=24, drafters=[ContextDrafter()])
    )
    steps = [e for e in events if isinstance(e, StepEvent)]
    _, status = full_status(qtbot, 1366)
    status.show_step(steps[-1])
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.reset(chat_engine.baseline_tokens_per_second)
    panel.add_steps(steps)
    line = answer_stats(answer_record(final, chat_engine.baseline_tokens_per_second)[0])
    rates = [
        re.search(r"([\d.]+) tokens/s", text).group(1)
        for text in (line, status.rate.text(), panel.findChild(QLabel, "speedupCaption").text())
    ]
    assert rates[0] == rates[1] == rates[2] == f"{final.stats.decode_tokens_per_second:.1f}", (line, rates)
    assert f"first token {final.stats.time_to_first_token_ms:.0f} ms" in line, "the first token apart"


def test_the_speedup_panels_caption_says_why_drafting_is_off(qtbot):
    """The policy's decision, as the status bar's tooltip says it, in the speedup panel's caption too;
    gone once drafting runs again."""
    from draftscope.engine.events import StepEvent, StepTree
    from draftscope.engine.policy import PAUSED_NOTE
    from draftscope.gui.panels.speedup import SpeedupPanel

    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.reset(31.0)
    step = StepEvent(
        **dict(step=1, token_ids=[1], pieces=["a"], provenance=["target"], tree=StepTree(), accepted_path=[]),
        **dict(proposed=0, accepted=0, draft_ms=0.0, verify_ms=30.0, total_ms=30.0, tokens_total=1, steps_total=1),
        **dict(tau=1.0, tokens_per_second=30.0, speedup_estimate=None, elapsed_ms=30.0),
        **dict(plain_tokens_per_second=31.0, drafting=PAUSED_NOTE),
    )
    later = [
        StepEvent(**{**step.__dict__, "step": n, "tokens_total": n, "steps_total": n, "elapsed_ms": 30.0 * n})
        for n in range(2, 9)
    ]
    panel.add_steps([step, *later])
    caption = panel.findChild(QLabel, "speedupCaption").text()
    assert PAUSED_NOTE in caption and caption.endswith(PAUSED_NOTE), caption
    assert "31.0 tokens/s plain" in caption
    panel.add_steps([StepEvent(**{**later[-1].__dict__, "step": 9, "drafting": None})])
    assert "drafting paused" not in panel.findChild(QLabel, "speedupCaption").text()
