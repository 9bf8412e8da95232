"""The chat transcript: a conversation's messages rendered as Markdown, the answer being streamed
at its end, links (copy, edit, regenerate, inspect, a token's step) and the selected step marked.

``ChatTranscript`` observes a ``ChatSession`` (Qt-free): it shows the session's conversation
from the history store and never changes either. Links that act on the conversation are handed to the window as
``action_requested(verb, message id)`` and ``step_clicked(key, index)``.
"""

from __future__ import annotations

import html
import time

from PySide6.QtCore import QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QPalette, QTextCursor
from PySide6.QtWidgets import QApplication, QTextBrowser, QTextEdit

from draftscope.core.words import answer_stats
from draftscope.documents.prompt import left_out_note
from draftscope.gui.chat.continuing import Continuing
from draftscope.gui.chat.render import ACTION_SCHEME, COPY_SCHEME, STEP_SCHEME, ChatRenderer
from draftscope.gui.chat.tool_cards import TOOL_SCHEME, answer_calls, card_calls, cards_html, results_by_call
from draftscope.gui.chat.versions import first_version_text, version_note
from draftscope.gui.chat.welcome import welcome_html

FILE_SCHEME = "attachment"  # attachment:<message id>/<its position among the message's files>
STREAM_RENDER_SHARE_WAIT = 4  # waits this many times a render's duration before the next (a fifth of the time)
CURSOR = "▌"  # marks the end of the answer being written


def message_html(
    role: str, body: str, actions: list[str], stats: dict | None, files: str = "", versions: str = ""
) -> str:
    who = "You" if role == "user" else "Assistant"
    links = " &nbsp; ".join(actions)
    out = f'<p style="margin-top:14px;"><b>{who}</b> &nbsp; <small>{links}</small></p>{files}{body}{versions}'
    if stats:
        out += f'<p><small style="color:gray;">{html.escape(answer_stats(stats))}</small></p>'
    return out


def versions_html(m, history=None) -> str:
    """Under an answer with several versions: "‹ 2 / 3 ›" to page through them, and a plain word on
    how this version compares with the others (gui/chat/versions.py)."""
    if m.role != "assistant" or len(m.versions) < 2:
        return ""
    at = m.versions.index(m.id)

    def page(step: int, arrow: str) -> str:
        target = at + step
        if not 0 <= target < len(m.versions):
            return f'<span style="color:gray; font-size:x-large;">&nbsp;{arrow}&nbsp;</span>'
        title = f"version {target + 1}"
        return (
            f'<a href="{ACTION_SCHEME}:version/{m.versions[target]}" title="{title}" '
            f'style="font-size:x-large;"><b>&nbsp;{arrow}&nbsp;</b></a>'
        )

    out = f"<p>{page(-1, '‹')} {at + 1} / {len(m.versions)} {page(1, '›')}"
    if note := version_note(m, first_version_text(history, m) if history is not None else None):
        out += f' &nbsp; <small style="color:gray;">{html.escape(note)}</small>'
    return out + "</p>"


def _key(m) -> tuple:
    return m.id, m.created, m.content  # a continued answer is the same message with more text


def files_html(m) -> str:
    """A sent message's files: each a link to the text the model read of it."""
    if not m.files:
        return ""
    links = []
    for i, f in enumerate(m.files):
        how = html.escape(left_out_note(f)) or (
            f"{f.get('tokens', 0):,} tokens" + (f", {len(f['passages'])} passages" if f.get("passages") else "")
        )
        links.append(f'<a href="{FILE_SCHEME}:{m.id}/{i}">{html.escape(f["name"])}</a> <small>({how})</small>')
    return "<p><small>Attached:</small> " + " &nbsp; ".join(links) + "</p>"


class ChatTranscript(QTextBrowser):
    action_requested = Signal(str, int)  # "regenerate" / "edit" / "inspect" / "version", a message id
    step_clicked = Signal(str, int)  # a token's step: (message id or "live", step index)
    said = Signal(str)  # a short confirmation for the status bar ("Code copied …")

    tool_decision = Signal(str, str)  # "approve" / "deny" / "always", a call's id (a card's links)

    def __init__(self, session, *, code_style: str = "default", dark: bool = False) -> None:
        super().__init__(objectName="chatView")
        self.session = session
        self.history = session.history
        self.renderer = ChatRenderer(code_style, dark=dark)
        self.show_provenance = False  # tokens coloured by their drafter, each a link to its step
        self.selection = lambda: None  # () -> (answer id or None for the live one, step index) to mark
        self.live_calls = dict  # () -> {call id: ToolCall}: the calls of the tool loop under way (newer than kept)
        self.stream_text = None  # text -> the part shown (a tool loop holds calls back); None: all of it
        self.unfolded: set[int] = set()  # tool results shown unfolded (their messages' ids)
        self._results: dict = {}  # the conversation's tool results by call id (their cards show them)
        # Messages are known by (id, when written): SQLite gives a message written after others were
        # deleted (an edit, a regenerate) the id the first deleted one had, so an id alone would show
        # the old message's text under the new one's figures.
        self._shown: list[tuple] = []  # keys of the messages in the view, in order
        self._html_cache: dict[tuple, str] = {}  # key -> rendered body (a message never changes)
        self.code_blocks: dict[str, list[str]] = {}  # "<message id>", "live" or "stream" -> code of each block
        # the answer being streamed: where it begins in the document, its text and steps so far
        self.streaming = False
        self.streaming_text = ""
        self.current_steps: list = []
        self._continuing = Continuing(session)  # the answer being written on, and the one that offers Continue
        self._offer: int | None = None
        self._stream_start: int | None = None
        self._stream_render_at, self._stream_render_s = 0.0, 0.0  # when it last rendered, and how long it took
        self._stream_timer = QTimer(self, singleShot=True)
        self._stream_timer.timeout.connect(lambda: self.streaming and self.render(stream_only=True))
        # Following: the view stays at the end while it grows (the answer being written), until the
        # user scrolls up; sending a message follows again. Kept on the scroll bar's range, which
        # changes only once Qt has laid the new text out (a scroll right after an insert is too early).
        self._following = True
        self._rendering = False  # the document is being changed here: scroll moves are not the user's
        self._restore: int | None = None  # where the user was reading, put back once the text is laid out
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scrolled)
        self.setOpenLinks(False)  # our links (copy, edit, regenerate) are handled here
        self.anchorClicked.connect(self._on_link)
        self.render()  # the session's conversation, or the welcome page

    # --- what is shown ---------------------------------------------------------------------------

    @property
    def conversation_id(self) -> int | None:
        return self.session.conversation_id

    def refresh(self) -> None:
        """Render from scratch (another conversation is shown, or messages were removed): from its
        end, as a conversation opens (a place kept in the one before means nothing here)."""
        self._shown, self._following, self._restore = [], True, None
        self.render()

    def set_show_provenance(self, on: bool) -> None:
        self.show_provenance = on
        self._restyle()

    def set_code_style(self, code_style: str, *, dark: bool) -> None:
        """Re-highlight code for another theme."""
        self.renderer.dark = dark
        self.renderer.set_code_style(code_style)
        self._restyle()

    def _restyle(self) -> None:
        self._html_cache.clear()
        self.refresh()

    def _on_range(self, _low: int, high: int) -> None:
        bar = self.verticalScrollBar()
        if self._following:
            bar.setValue(high)
        elif self._restore is not None:
            bar.setValue(min(self._restore, high))
            if high >= self._restore:
                self._restore = None

    def _on_scrolled(self, value: int) -> None:
        if not self._rendering:
            self._following = value >= self.verticalScrollBar().maximum() - 4
            self._restore = None

    # --- streaming -------------------------------------------------------------------------------

    def begin_stream(self) -> None:
        self.streaming, self.streaming_text = True, ""
        self.current_steps = self._continuing.begin()  # a continued answer streams on from its steps so far
        self._following = True  # a message was sent: show it and its answer
        self.render()

    def add_steps(self, events: list) -> None:
        self.current_steps.extend(events)
        text = "".join("".join(e.pieces) for e in events)
        self.streaming_text += self.stream_text(text) if self.stream_text is not None else text
        self.render(stream_only=True)

    def end_stream(self) -> None:
        """The answer ended (kept in the history, or not): show the conversation as stored."""
        self.streaming, self.streaming_text = False, ""
        self._continuing.end()
        self.render()

    # --- rendering -------------------------------------------------------------------------------

    def render(self, *, stream_only: bool = False) -> None:
        """Bring the view up to date with the history and the answer being streamed.

        Work is proportional to what changed: new messages are appended, and a streaming update
        replaces only the answer being written, so an update costs the same in a long conversation.
        A full re-render happens only when messages were removed or another conversation is shown.
        """
        follow, bar = self._following, self.verticalScrollBar()
        if not follow and self._restore is None:
            self._restore = bar.value()
        self._rendering = True
        try:
            self._render(stream_only)
        finally:
            self._rendering = False
        if follow:
            bar.setValue(bar.maximum())
        elif self._restore is not None and bar.maximum() >= self._restore:
            bar.setValue(self._restore)
            self._restore = None

    def _render(self, stream_only: bool) -> None:
        if not stream_only:
            self._drop_stream_region()
            messages = self.history.messages(self.conversation_id) if self.conversation_id is not None else []
            messages, self._offer = self._continuing.shown(messages, streaming=self.streaming)
            self._results = results_by_call(messages)
            live = self.live_calls()  # a card that changed state, a result unfolded: render again
            ids = [(_key(m), m.id == self._offer, self._cards_key(m, live)) for m in messages]
            if ids[: len(self._shown)] != self._shown or not self._shown:
                welcome = "" if messages or self.streaming else welcome_html()  # an empty conversation's page
                self.setHtml("".join(self._message_block(m) for m in messages) + welcome)
            else:
                self._append_html("".join(self._message_block(m) for m in messages[len(self._shown) :]))
            self._shown = ids
            if self.streaming:
                self._stream_start = self._append_html("")
        if self.streaming and self._stream_start is not None and self._stream_render_due(stream_only):
            self._render_stream()
        selected = self.selection()
        if not stream_only or selected is None or selected[0] is None:
            self.refresh_highlight()  # marks on a stored answer track the stream's edits by themselves

    def _render_stream(self) -> None:
        # the answer so far as Markdown (its drafters' colours when they are shown), re-rendered
        # whole: an unfinished list or code fence changes how earlier lines render
        started = time.perf_counter()
        blocks: list[str] = []
        if self.show_provenance:
            body = self.renderer.markdown_with_provenance(
                self.current_steps, blocks, key="live", text_colour=self._text_colour(), suffix=CURSOR
            )
        else:
            body = self.renderer.markdown(self._continuing.prefix + self.streaming_text + CURSOR, blocks, key="stream")
        self.code_blocks["live" if self.show_provenance else "stream"] = blocks
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._stream_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertHtml(message_html("assistant", body, [], None))
        self._stream_render_at, self._stream_render_s = time.perf_counter(), time.perf_counter() - started

    def _stream_render_due(self, stream_only: bool) -> bool:
        """Whether a streaming update re-renders the answer now: at most a fifth of the time goes
        to rendering (a render that took 20 ms waits 80 ms before the next), so the UI thread keeps
        most of its time in a long answer; the answer's end always renders."""
        if not stream_only:
            return True
        wait = STREAM_RENDER_SHARE_WAIT * self._stream_render_s - (time.perf_counter() - self._stream_render_at)
        if wait <= 0:
            return True
        if not self._stream_timer.isActive():  # what arrived meanwhile is shown when the wait is over
            self._stream_timer.start(int(wait * 1000) + 1)
        return False

    def _text_colour(self) -> str:
        return self.palette().color(QPalette.ColorRole.Text).name()

    def _cards_key(self, m, live: dict) -> tuple:
        cards = card_calls(m, self._results, live) if answer_calls(m) else []
        return tuple((c.key, c.message_id in self.unfolded) for c in cards)

    def _message_block(self, m) -> str:
        if m.role == "tool":  # a call's result: shown in its call's card
            return ""
        key = _key(m)
        calls = answer_calls(m)
        if key not in self._html_cache:
            # an answer that called tools (or was cut inside a call: its calls []) shows its prose (its
            # steps hold the calls' text, shown as cards)
            called = calls or "tool_calls" in (m.tool_fields or {})
            steps = self.history.steps(m.id) if self.show_provenance and m.role == "assistant" and not called else []
            blocks: list[str] = []
            if steps:
                self._html_cache[key] = self.renderer.markdown_with_provenance(
                    steps, blocks, key=str(m.id), text_colour=self._text_colour()
                )
            else:
                self._html_cache[key] = self.renderer.markdown(m.content, blocks, key=str(m.id))
            self.code_blocks[str(m.id)] = blocks
        verbs = ("copy", "edit") if m.role == "user" else ("copy", "regenerate")
        verbs += ("inspect",) if m.role == "assistant" and self.history.has_steps(m.id) else ()
        verbs += ("continue",) if m.id == self._offer else ()
        names = {"copy": "Copy", "edit": "Edit", "regenerate": "Regenerate", "inspect": "Inspect drafts"}
        names["continue"] = "Continue"
        actions = [f'<a href="{ACTION_SCHEME}:{verb}/{m.id}">{names[verb]}</a>' for verb in verbs]
        body = self._html_cache[key]
        if calls:
            cards = card_calls(m, self._results, self.live_calls())
            body += cards_html(cards, self.unfolded, dark=self.renderer.dark)
        return message_html(m.role, body, actions, m.stats, files_html(m), versions_html(m, self.history))

    def _append_html(self, fragment: str) -> int:
        """Append HTML at the end in a new block; returns where it starts."""
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.document().isEmpty():
            cursor.insertBlock()
        start = cursor.position()
        if fragment:
            cursor.insertHtml(fragment)
        return start

    def _drop_stream_region(self) -> None:
        if self._stream_start is None:
            return
        cursor = QTextCursor(self.document())
        cursor.setPosition(max(0, self._stream_start - 1))  # and the block break before it
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._stream_start = None

    # --- the selected step -----------------------------------------------------------------------

    def highlight_step(self, answer: int | None, index: int, *, scroll: bool = True) -> None:
        """Mark the tokens of a step (``answer``: its message id, None for the live answer).
        Tokens are step links only while drafted tokens are coloured; otherwise nothing maps text
        to steps, so nothing is marked."""
        href = f"{STEP_SCHEME}:{'live' if answer is None else answer}/{index}"
        marks = []
        palette = self.palette()
        doc = self.document()
        # the live answer is the streamed region at the end: scan only that
        start = self._stream_start if answer is None and self._stream_start is not None else 0
        block = doc.findBlock(start)
        while block.isValid():
            fragments = block.begin()
            while not fragments.atEnd():
                fragment = fragments.fragment()
                if fragment.charFormat().anchorHref() == href:
                    mark = QTextEdit.ExtraSelection()
                    mark.cursor = QTextCursor(doc)
                    mark.cursor.setPosition(fragment.position())
                    mark.cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                    mark.format.setBackground(palette.color(QPalette.ColorRole.Highlight))
                    mark.format.setForeground(palette.color(QPalette.ColorRole.HighlightedText))
                    marks.append(mark)
                fragments += 1
            block = block.next()
        self.setExtraSelections(marks)
        if marks and scroll:
            cursor = QTextCursor(doc)
            cursor.setPosition(marks[0].cursor.selectionStart())
            self.setTextCursor(cursor)
            self.ensureCursorVisible()

    def refresh_highlight(self) -> None:
        """After a re-render, mark the selected step again (positions changed)."""
        selected = self.selection()
        if self.show_provenance and selected is not None:
            self.highlight_step(*selected, scroll=False)
        else:
            self.setExtraSelections([])

    # --- links -----------------------------------------------------------------------------------

    def _on_link(self, url: QUrl) -> None:
        scheme = url.scheme()
        key, _, ident = url.path().partition("/")
        if scheme == COPY_SCHEME:
            blocks = self.code_blocks.get(key, [])
            if ident.isdigit() and int(ident) < len(blocks):
                QApplication.clipboard().setText(blocks[int(ident)])
                self.said.emit("Code copied to the clipboard")
        elif scheme == ACTION_SCHEME and ident.isdigit():
            if key == "copy":
                self._copy_message(int(ident))
            else:
                self.action_requested.emit(key, int(ident))
        elif scheme == STEP_SCHEME and ident.isdigit():
            self.step_clicked.emit(key, int(ident))
        elif scheme == FILE_SCHEME and key.isdigit() and ident.isdigit():
            self._show_file(int(key), int(ident))
        elif scheme == TOOL_SCHEME:
            self._on_tool_link(key, url.path(QUrl.ComponentFormattingOption.FullyDecoded).partition("/")[2])
        elif scheme in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    def _show_file(self, message_id: int, position: int) -> None:
        """What the model read of a sent file, in a dialog of its own."""
        from draftscope.gui.chat.attachments import sent_file_dialog  # noqa: PLC0415  # via gui.jobs: the engine, torch

        for m in self.history.messages(self.conversation_id) if self.conversation_id is not None else []:
            if m.id == message_id and position < len(m.files):
                self.file_dialog = sent_file_dialog(self, m.files[position])
                self.file_dialog.open()

    def _copy_message(self, message_id: int) -> None:
        for m in self.history.messages(self.conversation_id) if self.conversation_id is not None else []:
            if m.id == message_id:
                QApplication.clipboard().setText(m.content)
                self.said.emit("Message copied to the clipboard")

    def _on_tool_link(self, verb: str, target: str) -> None:
        """A card's link: a decision on a call (the loop's), or its result unfolded, folded or copied."""
        if verb in ("approve", "deny", "always"):
            self.tool_decision.emit(verb, target)
        elif verb in ("show", "hide") and target.isdigit():
            (self.unfolded.add if verb == "show" else self.unfolded.discard)(int(target))
            self.render()
        elif verb == "copy" and target.isdigit():
            result = next((m for m in self._results.values() if m.id == int(target)), None)
            if result is not None:
                QApplication.clipboard().setText(result.content)
                self.said.emit("Tool result copied to the clipboard")
