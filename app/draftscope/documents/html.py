"""An HTML page's visible text: no scripts, styles or head, blocks on lines of their own.

Parsed by the reading child (:mod:`draftscope.documents.child`), never in the caller's process:
Python's ``html.parser`` takes quadratic time or worse on some malformed pages (15 KB of
unclosed ``<a `` tags held it 16 s on 3.11), so a page gets the same time limit as a PDF.

The head is left out as HTML defines it: it ends at ``</head>``, at ``<body>``, at the first tag
that belongs in a body, or at the first text outside a head element, so a page that leaves out
the optional ``</head>`` (valid HTML) still gives its body."""

from __future__ import annotations

from html.parser import HTMLParser

SKIP = {"script", "style", "noscript", "template"}  # never seen by a reader, wherever they are
VOID_HEAD = {"base", "basefont", "bgsound", "link", "meta"}  # no end tag: they hold no text
HEAD_CONTENT = VOID_HEAD | {"title", "noframes"} | SKIP
"""The elements HTML allows in a head; any other start tag opens the body."""
BLOCKS = {
    "p",
    "div",
    "br",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "section",
    "article",
    "blockquote",
    "table",
    "ul",
    "ol",
    "dt",
    "dd",
    "hr",
    "title",
}


class VisibleText(HTMLParser):
    """Feed it a page; ``parts`` is its visible text, blocks apart by newlines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.in_head = False
        self.head_element: str | None = None  # a head element open (its text is the head's)

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "head":
            self.in_head = True
            return
        if self.in_head and tag not in HEAD_CONTENT:
            self.in_head = False  # a body's tag (or <body>) ends a head left open
        if self.in_head and self.head_element is None and tag not in VOID_HEAD:
            self.head_element = tag
        if tag in SKIP:
            self.skipping += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag) -> None:
        if tag in ("head", "body", "html"):
            self.in_head, self.head_element = False, None
        elif tag == self.head_element:
            self.head_element = None
        if tag in SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data) -> None:
        if self.in_head and self.head_element is None and data.strip():
            self.in_head = False  # text outside a head element starts the body
        if not self.skipping and not self.in_head:
            self.parts.append(data)


def visible_text(page: str) -> str:
    """The page's visible text, one block a line, runs of white space as one space."""
    parser = VisibleText()
    parser.feed(page)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)
