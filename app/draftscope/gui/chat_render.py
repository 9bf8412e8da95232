"""Chat messages as HTML for a QTextBrowser: Markdown (markdown-it-py) with code blocks highlighted
by pygments and a "Copy" link above each block.

Qt's rich text understands a subset of HTML 4 with inline CSS, so the code is highlighted with
inline styles (no style sheet classes) and each block is a one-cell table, which QTextDocument
draws with a background and padding. Raw HTML in a message is escaped, never interpreted: the
model's output must not be able to inject links or markup.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound

COPY_SCHEME = "copy"  # copy:<block index>
ACTION_SCHEME = "action"  # action:<verb>/<message id>
STEP_SCHEME = "step"  # step:<message id or live>/<step index>: a token links to its decoding step


@dataclass
class RenderedChat:
    html: str
    code_blocks: list[str] = field(default_factory=list)  # the raw text behind each copy:<i> link


class ChatRenderer:
    """Renders messages; keeps the code of every block so a copy link can put it on the clipboard."""

    def __init__(self, code_style: str = "default", *, dark: bool = False) -> None:
        self.dark = dark
        self.set_code_style(code_style)
        self._md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
        self._md.options["highlight"] = None  # fences are rendered by _fence below
        # markdown-it binds rules to its renderer, hence the lambda (``_r`` is that renderer)
        fence = lambda _r, tokens, idx, options, env: self._fence(tokens, idx)  # noqa: E731
        self._md.add_render_rule("fence", fence)
        self._md.add_render_rule("code_block", fence)
        self._blocks: list[str] | None = None

    def set_code_style(self, name: str) -> None:
        try:
            style = get_style_by_name(name)
        except ClassNotFound:
            style = get_style_by_name("default")
        self._formatter = HtmlFormatter(style=style, noclasses=True, nowrap=True)
        self._code_background = style.background_color or ("#1e1e1e" if self.dark else "#f6f8fa")

    # ------------------------------------------------------------------ markdown → html

    def markdown(self, text: str, blocks: list[str], *, key: str = "0") -> str:
        """HTML for one message; its code blocks are appended to ``blocks`` and linked as
        ``copy:<key>/<index>``."""
        self._blocks, self._key = blocks, key
        try:
            return self._md.render(text)
        finally:
            self._blocks = None

    def _fence(self, tokens, idx) -> str:
        token = tokens[idx]
        code = token.content
        language = (token.info or "").strip().split(" ")[0]
        lexer = _lexer_for(language, code)
        body = highlight(code, lexer, self._formatter).rstrip("\n")
        index = len(self._blocks)
        self._blocks.append(code)
        label = html.escape(language or getattr(lexer, "name", "text").lower())
        muted = "#9aa4b2" if self.dark else "#6a737d"
        return (
            f'<table width="100%" cellspacing="0" cellpadding="8" bgcolor="{self._code_background}" '
            f'style="margin-top:4px; margin-bottom:8px;">'
            f'<tr><td><span style="color:{muted}; font-size:small;">{label}</span>'
            f'&nbsp;&nbsp;<a href="{COPY_SCHEME}:{self._key}/{index}" style="font-size:small;">Copy</a>'
            f'<pre style="margin:0; font-family:monospace;">{body}</pre></td></tr></table>\n'
        )


def _lexer_for(language: str, code: str):
    if language:
        try:
            return get_lexer_by_name(language, stripnl=False)
        except ClassNotFound:
            return TextLexer(stripnl=False)
    try:  # unlabelled fences: guess, but only trust a confident guess
        lexer = guess_lexer(code, stripnl=False)
        return lexer if lexer.analyse_text(code) >= 0.3 else TextLexer(stripnl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False)


# Where each token of an answer came from (the chat's "colour drafted tokens" view).
PROVENANCE_COLOURS = {
    "light": {"retrieval": "#cfe3ff", "context": "#d3f5d3", "model": "#ead9ff", "recurrent": "#ffe2c4",
              "learned": "#fff3b0"},
    "dark": {"retrieval": "#1f3a5f", "context": "#1f4a2a", "model": "#3d2a5c", "recurrent": "#5a3a1a",
             "learned": "#4d4418"},
}
PROVENANCE_LABELS = {"retrieval": "drafted from the datastore", "context": "drafted from the conversation",
                     "model": "drafted by the draft model", "recurrent": "drafted by the recurrent drafter",
                     "learned": "drafted from the model's past answers",
                     "target": "written by the target model"}


def token_marks(steps, *, dark: bool = False):
    """(text, step index, source, background colour or None, tooltip) per token of an answer, a
    token's text split at line breaks (each line its own paragraph: Qt lays out one paragraph at
    a time, so a long answer stays cheap to extend). Line breaks come as ("\n", ...) entries.
    ``steps`` are StepEvents or their dicts (as stored in the history)."""
    colours = PROVENANCE_COLOURS["dark" if dark else "light"]
    for index, step in enumerate(steps):
        get = step.get if isinstance(step, dict) else lambda k, s=step: getattr(s, k)
        for piece, source in zip(get("pieces"), get("provenance")):
            tip = f"step {get('step')}: {PROVENANCE_LABELS.get(source, source)}"
            for n, line in enumerate(piece.split("\n")):
                if n:
                    yield "\n", index, source, None, tip
                if line:
                    yield line, index, source, colours.get(source), tip


def provenance_html(steps, *, dark: bool = False, key: str | None = None, text_colour: str | None = None) -> str:
    """An answer token by token, each coloured by its source, with a tooltip naming the step.
    With ``key`` (the message id, or "live"), each token links to ``step:KEY/INDEX`` so a click
    selects its step; the link keeps the text colour and no underline, so it still reads as text."""
    link_style = f"color:{text_colour or ('#e8e8e8' if dark else '#1a1a1a')};text-decoration:none;"
    paragraph = '<p style="white-space:pre-wrap;">'
    out = [paragraph]
    for text, index, _source, colour, tip in token_marks(steps, dark=dark):
        if text == "\n":
            out.append("</p>" + paragraph)
            continue
        text, tip = html.escape(text), html.escape(tip, quote=True)
        style = f"background-color:{colour};" if colour else ""
        if key is None:
            out.append(f'<span title="{tip}" style="{style}">{text}</span>')
        else:
            out.append(f'<a href="{STEP_SCHEME}:{key}/{index}" title="{tip}" style="{link_style}{style}">{text}</a>')
    return "".join(out) + "</p>"


def provenance_legend(*, dark: bool = False) -> str:
    colours = PROVENANCE_COLOURS["dark" if dark else "light"]
    items = [f'<span style="background-color:{colours[k]};">&nbsp;{k}&nbsp;</span>' for k in ("retrieval", "learned", "context", "model")]
    return "<small>Drafted tokens: " + " ".join(items) + " · unmarked: the target model</small>"
