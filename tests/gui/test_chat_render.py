"""The chat's rendering: Markdown with each token's drafter colour inside it (View ▸ Colour drafted
tokens), stored and while it streams."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCursor, QTextDocument

from draftscope.engine.events import StepEvent, StepTree
from draftscope.gui.chat.render import ChatRenderer, provenance_words
from draftscope.gui.palettes import PROVENANCE_COLOURS

# An answer as the engine streams it: (pieces, their sources) per step.
ANSWER = [
    (["## Reading", " a file", "\n\n"], ["target", "retrieval", "target"]),
    (["Use **", "open", "**", " with", ":\n\n"], ["target", "context", "context", "target", "target"]),
    (
        ["```python\n", "with open", "(path) as f", ":\n", "    text = f.read()\n", "```\n\n"],
        ["target", "retrieval", "retrieval", "target", "model", "target"],
    ),
    (["- one\n", "- two <b>x</b>\n"], ["learned", "target"]),
]


def steps_of(answer=ANSWER):
    return [
        StepEvent(
            step=i + 1,
            token_ids=list(range(len(p))),
            pieces=p,
            provenance=s,
            tree=StepTree(),
            accepted_path=[],
            proposed=0,
            accepted=0,
            draft_ms=0,
            verify_ms=0,
            total_ms=0,
            tokens_total=0,
            steps_total=0,
            tau=1.0,
            tokens_per_second=0,
            speedup_estimate=None,
        )
        for i, (p, s) in enumerate(answer)
    ]


def text_of(steps) -> str:
    return "".join("".join(s.pieces) for s in steps)


def document(html: str) -> QTextDocument:
    doc = QTextDocument()
    doc.setHtml(html)
    return doc


def formats(doc: QTextDocument, word: str):
    """The character format of each character of the first occurrence of ``word`` in ``doc``."""
    start = doc.toPlainText().index(word)
    out = []
    for k in range(len(word)):
        cursor = QTextCursor(doc)
        cursor.setPosition(start + k + 1)  # the format of the character before the cursor
        out.append(cursor.charFormat())
    return out


def test_coloured_answers_are_rendered_markdown_with_the_same_text(qtbot):
    renderer = ChatRenderer()
    steps = steps_of()
    coloured = document(renderer.markdown_with_provenance(steps, [], key="7", text_colour="#111111"))
    plain = document(renderer.markdown(text_of(steps), [], key="7"))
    assert coloured.toPlainText() == plain.toPlainText(), "colouring never changes what is shown"
    shown = coloured.toPlainText()
    assert "**" not in shown and "##" not in shown and "```" not in shown, "Markdown, not its source"
    assert "Reading a file" in shown and "text = f.read()" in shown and "two <b>x</b>" in shown, "raw HTML stays text"
    html = coloured.toHtml()
    assert "font-weight" in html and "<li" in html, "bold and list items are rendered"


def test_each_token_carries_its_drafter_colour_and_step(qtbot):
    light = PROVENANCE_COLOURS["light"]
    doc = document(ChatRenderer().markdown_with_provenance(steps_of(), [], key="7", text_colour="#111111"))
    expect = {
        "a file": ("retrieval", 0),
        "open": ("context", 1),
        "with open": ("retrieval", 2),
        "text = f.read()": ("model", 2),
        "one": ("learned", 3),
    }
    for word, (source, step) in expect.items():
        for ch, fmt in zip(word, formats(doc, word)):
            if ch.isspace():
                continue  # spaces take no token's colour
            assert fmt.anchorHref() == f"step:7/{step}", (word, fmt.anchorHref())
            assert fmt.toolTip() == f"step {step + 1}: {provenance_words(source)}", (word, fmt.toolTip())
            assert fmt.background().color() == QColor(light[source]), word
    heading = formats(doc, "Reading")
    assert all(
        f.toolTip() == "step 1: written by the target model" and f.background().style() == Qt.BrushStyle.NoBrush
        for f in heading
    )


def test_highlighted_code_keeps_its_colours_under_the_drafter_colour(qtbot):
    renderer = ChatRenderer("default")
    doc = document(renderer.markdown_with_provenance(steps_of(), [], key="7", text_colour="#111111"))
    keyword = formats(doc, "with open")[0]  # "with" is a keyword: pygments colours it
    assert keyword.foreground().color() != QColor("#111111")
    assert keyword.background().color() == QColor(PROVENANCE_COLOURS["light"]["retrieval"])
    label = formats(doc, "python")  # the block's label is the app's, not a token: no step
    assert all(f.anchorHref() == "" for f in label)


def test_the_window_streams_coloured_markdown(qtbot, tokenizer, tmp_path):
    from engine_fixtures import tiny_llama
    from runtime_helpers import runtime_for

    from draftscope.engine.engine import Engine
    from draftscope.gui.main_window import MainWindow
    from draftscope.storage import HistoryStore

    window = MainWindow(
        runtime_for(Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")),
        HistoryStore(tmp_path / "h.sqlite3"),
    )
    qtbot.addWidget(window)
    window.set_show_provenance(True)
    window.chat_view.begin_stream()
    steps = steps_of()
    window.chat_view.add_steps(steps[:3])  # mid-answer, the code block just closed
    qtbot.waitUntil(lambda: "text = f.read()" in window.chat_view.toPlainText(), timeout=5000)
    shown = window.chat_view.toPlainText()
    assert "```" not in shown and "text = f.read()" in shown and shown.rstrip().endswith("▌")
    doc = window.chat_view.document()
    assert all(f.anchorHref() == "step:live/1" for f in formats(doc, "open"))
    window.chat_view.add_steps(steps[3:])  # right after: shown once the render's wait is over
    qtbot.waitUntil(lambda: "two <b>x</b>" in window.chat_view.toPlainText(), timeout=5000)
    assert all(f.background().color() == QColor(PROVENANCE_COLOURS["light"]["learned"]) for f in formats(doc, "one"))


def test_an_unlabelled_code_block_is_plain_text_not_a_guessed_language(qtbot):
    """Pygments' guess named a model's Python test lines "transact-sql" and a function "cplint"."""
    blocks: list[str] = []
    code = "def is_palindrome(s):\n    return s == s[::-1]\n\nassert is_palindrome('racecar')\n"
    html = ChatRenderer().markdown(f"```\n{code}```\n", blocks)
    assert blocks == [code]
    assert ">text</span>" in html and "cplint" not in html and "transact" not in html
    labelled = ChatRenderer().markdown(f"```python\n{code}```\n", [])
    assert ">python</span>" in labelled
