"""Help ▸ Guide: a short page in the app on what to do first (chat, attach, read the speedup panel,
build a datastore, serve), and Help ▸ Documentation: the project's README as the installed package
carries it (its long description), or the checkout's README.md, shown in the app: no network and
no browser needed."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout

GUIDE = """\
# Draftscope in five minutes

Draftscope answers with your model and makes it faster by **drafting**: cheap guesses of the next
words (from your datastore, the conversation, the model's earlier answers, a small draft model)
that the model checks all at once. What it keeps is exactly what it would have written alone.

## Chat
Type in the box under the chat; **Enter** sends, **Shift+Enter** breaks the line, **Stop** ends an
answer. Under each answer: **Regenerate** (the old answer stays as a version: ‹ 1 / 2 ›), **Edit**
your message to send it again, **Copy**. The switcher above the chat loads another model; the
conversation stays.

## Attach files
**Attach…** beside the message box, or drop files on the chat: text, code, Markdown, HTML, PDF, Word.
A file that fits is read whole; a long one sends the passages that best answer your message (name
the file in your question to take passages from it alone). Click a sent file's name to see what
the model read. **View ▸ Documents** gives a conversation a whole folder to search.

## Read the speedup panel
**View ▸ Show all inspection panels** (or **Inspect drafts** under an answer). *Speedup* compares
this answer's writing rate with plain decoding measured on this computer; *τ* is the words each
step wrote (1.00: no draft was accepted). *Accepted drafts* lists every step, *Draft tree* shows
what was guessed and what the model kept. **View ▸ Colour drafted tokens** colours each word by
where it came from. Drafting pays most when the answer repeats text: code edits, quotes, summaries.

## Build a datastore
**File ▸ Build a datastore…** indexes your chat logs, code folders and text files with the model's
tokenizer, so answers that resemble them draft from them. "Use this datastore now" makes it the
one drafts come from for the models that share this tokenizer; the others keep their own.

## Serve other programs
**File ▸ Settings ▸ Server** starts a local OpenAI-compatible server (the status bar shows its
address): editors, scripts and agents get the same fast answers. `draftscope serve` runs it
without the window.
"""


def guide_dialog(parent) -> QDialog:
    """The guide, in a window of its own (Help ▸ Guide)."""
    return _page(parent, "guideDialog", "Draftscope guide", GUIDE)


CHECKOUT = Path(__file__).resolve().parents[4]  # app/draftscope/gui/dialogs -> a source checkout's root


def documentation_text() -> str:
    """The project's README: a source checkout's file (its screenshots beside it), else the
    installed package's long description, else the guide."""
    readme = CHECKOUT / "README.md"
    if readme.is_file():
        return readme.read_text(encoding="utf-8")
    try:
        text = metadata.metadata("draftscope").get_payload() or ""
    except metadata.PackageNotFoundError:
        text = ""
    return text if text.strip() else GUIDE


def documentation_dialog(parent) -> QDialog:
    """The README in the app (Help ▸ Documentation, and the link in About)."""
    return _page(parent, "documentationDialog", "Draftscope documentation", documentation_text())


def _page(parent, name: str, title: str, markdown: str) -> QDialog:
    dialog = QDialog(parent, objectName=name)
    dialog.setWindowTitle(title)
    page = QTextBrowser(objectName=f"{name}Text")
    page.setOpenExternalLinks(True)
    page.setSearchPaths([str(CHECKOUT)])  # the README's screenshots, in a checkout
    page.setMarkdown(markdown)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    layout.addWidget(page)
    layout.addWidget(buttons)
    dialog.resize(640, 560)
    return dialog
