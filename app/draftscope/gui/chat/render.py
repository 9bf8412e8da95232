"""Chat messages as HTML for a QTextBrowser: Markdown (markdown-it-py) with code blocks highlighted
by pygments and a "Copy" link above each block.

Qt's rich text understands a subset of HTML 4 with inline CSS, so the code is highlighted with
inline styles (no style sheet classes) and each block is a one-cell table, which QTextDocument
draws with a background and padding. Raw HTML in a message is escaped, never interpreted: the
model's output must not be able to inject links or markup.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound

from draftscope.drafter_kinds import kinds
from draftscope.gui.palettes import CODE_BACKGROUND, CODE_LABEL, PROVENANCE_COLOURS, drafter_colours

COPY_SCHEME = "copy"  # copy:<block index>
CHROME = "chrome"  # class of the app's own words in rendered messages (a code block's label and Copy link)
ACTION_SCHEME = "action"  # action:<verb>/<message id>
STEP_SCHEME = "step"  # step:<message id or live>/<step index>: a token links to its decoding step


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
        self._code_background = style.background_color or CODE_BACKGROUND["dark" if self.dark else "light"]

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
        label = html.escape(language or "text")
        muted = CODE_LABEL["dark" if self.dark else "light"]
        return (
            f'<table width="100%" cellspacing="0" cellpadding="8" bgcolor="{self._code_background}" '
            f'style="margin-top:4px; margin-bottom:8px;">'
            f'<tr><td><span class="{CHROME}"><span style="color:{muted}; font-size:small;">{label}</span>'
            f'&nbsp;&nbsp;<a href="{COPY_SCHEME}:{self._key}/{index}" style="font-size:small;">Copy</a></span>'
            f'<pre style="margin:0; font-family:monospace;">{body}</pre></td></tr></table>\n'
        )

    def markdown_with_provenance(
        self, steps, blocks: list[str], *, key: str, text_colour: str, suffix: str = ""
    ) -> str:
        """An answer rendered as Markdown (headings, lists, highlighted code) with each token's
        text coloured by its drafter and linked to its step (``step:KEY/INDEX``). ``steps`` are
        StepEvents or their stored dicts; ``suffix`` is shown after the text, unmarked (the
        streaming cursor)."""
        text, marks = _marked_text(steps, dark=self.dark)
        rendered = self.markdown(text + suffix, blocks, key=key)
        return _Marker(text, marks, key, text_colour).run(rendered)


def _lexer_for(language: str, code: str):
    """The fence's own language; an unlabelled fence stays plain text. Pygments' guess named a Python
    function "cplint" and a model's test lines "transact-sql": a wrong label misleads more than none."""
    if language:
        try:
            return get_lexer_by_name(language, stripnl=False)
        except ClassNotFound:
            return TextLexer(stripnl=False)
    return TextLexer(stripnl=False)


def provenance_words(source: str) -> str:
    """Where a token came from, in words: its drafter kind's, the target's, or the source's name."""
    if source == "target":
        return "written by the target model"
    return next((k.drafted for k in kinds() if k.name == source), source)


def provenance_legend(*, dark: bool = False) -> str:
    items = [
        f'<span style="background-color:{colour};">&nbsp;{name}&nbsp;</span>'
        for name, colour in drafter_colours("dark" if dark else "light").items()
    ]
    return "<small>Drafted tokens: " + " ".join(items) + " · unmarked: the target model</small>"


def _marked_text(steps, *, dark: bool) -> tuple[str, list[tuple[int, str | None, str]]]:
    """An answer's text and, per character, (step index, background colour or None, tooltip)."""
    colours = PROVENANCE_COLOURS["dark" if dark else "light"]
    text, marks = [], []
    for index, step in enumerate(steps):
        get = step.get if isinstance(step, dict) else lambda k, s=step: getattr(s, k)
        for piece, source in zip(get("pieces"), get("provenance")):
            tip = f"step {get('step')}: {provenance_words(source)}"
            text.append(piece)
            marks.extend([(index, colours.get(source), tip)] * len(piece))
    return "".join(text), marks


_COLOUR = re.compile(r"(?:^|;)\s*color\s*:\s*([^;]+)")
SEARCH_AHEAD = 64  # characters of source a rendered character may be looked for in (markup removed)


class _Marker(HTMLParser):
    """Wraps the text of rendered Markdown in step links coloured by drafter. Markdown keeps the
    source's characters in order and only removes markup (``**``, ``#``, fences), so each shown
    character is matched to the next equal character of the source; whitespace and the app's own
    words (class ``chrome``) take no source character and stay unmarked."""

    def __init__(self, source: str, marks, key: str, text_colour: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source, self.marks, self.key, self.text_colour = source, marks, key, text_colour
        self.at = 0  # the next source character to match
        self.out: list[str] = []
        self.chrome = 0  # depth of spans inside the app's own words
        self.colours: list[tuple[str, str | None]] = []  # (tag, its text colour): highlighted code keeps its own

    def run(self, rendered: str) -> str:
        self.feed(rendered)
        self.close()
        return "".join(self.out)

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if tag == "span" and (self.chrome or (CHROME in (attrs.get("class") or "").split())):
            self.chrome += 1
        if tag == "pre":  # a fence's opening line (``` and its language) shows no text of its own
            fence = min(
                (i for i in (self.source.find(m, self.at, self.at + SEARCH_AHEAD) for m in ("```", "~~~")) if i >= 0),
                default=-1,
            )
            if fence >= 0:
                end = self.source.find("\n", fence)
                self.at = end + 1 if end >= 0 else len(self.source)
        colour = _COLOUR.search(attrs.get("style") or "")
        self.colours.append((tag, colour.group(1) if colour else None))
        self.out.append(self.get_starttag_text())

    def handle_startendtag(self, tag, attrs) -> None:
        self.out.append(self.get_starttag_text())

    def handle_endtag(self, tag) -> None:
        if tag == "span" and self.chrome:
            self.chrome -= 1
        for i in range(len(self.colours) - 1, -1, -1):
            if self.colours[i][0] == tag:
                del self.colours[i:]
                break
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.chrome:
            self.out.append(html.escape(data, quote=False))
            return
        run, run_mark = [], None
        for ch in data:
            mark = None if ch.isspace() else self._match(ch)
            if mark != run_mark and run:
                self._emit("".join(run), run_mark)
                run = []
            run.append(ch)
            run_mark = mark
        if run:
            self._emit("".join(run), run_mark)

    def _match(self, ch: str):
        found = self.source.find(ch, self.at, self.at + SEARCH_AHEAD)
        if found < 0 or found >= len(self.marks):
            return None
        self.at = found + 1
        return self.marks[found]

    def _emit(self, text: str, mark) -> None:
        text = html.escape(text, quote=False)
        if mark is None:
            self.out.append(text)
            return
        index, colour, tip = mark
        # a link takes the colour of the text it sits in (highlighted code), else the text's
        foreground = next((c for _tag, c in reversed(self.colours) if c), self.text_colour)
        style = f"color:{foreground};text-decoration:none;" + (f"background-color:{colour};" if colour else "")
        self.out.append(
            f'<a href="{STEP_SCHEME}:{self.key}/{index}" title="{html.escape(tip, quote=True)}" '
            f'style="{style}">{text}</a>'
        )
