"""The chat's first page, shown while a conversation has no message: a line on what the app does and
example prompts, each a link (``action:example/<n>``, handed to the window like the answers' own
links) that puts the prompt in the message box. They are the prompts where drafting shows: a copy
edit and a code change give back most of what they are given, so drafts from the conversation are
accepted in long runs; the one about a file opens the attach dialog first."""

from __future__ import annotations

import html
from typing import NamedTuple

from draftscope.gui.chat.render import ACTION_SCHEME


class Example(NamedTuple):
    title: str  # the link's words
    why: str  # what it shows, beside the link
    prompt: str  # what goes in the message box
    attach: bool = False  # the prompt is about a file: the attach dialog opens


SNIPPET = (
    "Their going to the libary tomorow to return the books, which was overdue since last week. "
    "Its the third time this happend, and the fine are getting bigger every time."
)

FUNCTION = """def mean(values):
    total = 0
    for v in values:
        total = total + v
    return total / len(values)"""

EXAMPLES = (
    Example(
        "Copy-edit a paragraph",
        "the answer repeats most of the text: long runs of it are drafted",
        f"Correct the spelling and grammar of this paragraph, changing nothing else:\n\n{SNIPPET}",
    ),
    Example(
        "Ask about a file",
        "attach a document or some code, then ask; quoting it back drafts fast",
        "Summarise the attached file in five bullet points, quoting its key sentences.",
        attach=True,
    ),
    Example(
        "Improve some code",
        "the function comes back with its changes: drafted from your message",
        f"Add type hints and a docstring to this function, and make it refuse an empty list:\n\n{FUNCTION}",
    ),
)


def welcome_html() -> str:
    """The page: what the app does, then the examples as links."""
    links = "".join(
        f'<p><a href="{ACTION_SCHEME}:example/{n}"><b>{html.escape(e.title)}</b></a>'
        f' &nbsp; <small style="color:gray;">{html.escape(e.why)}</small></p>'
        for n, e in enumerate(EXAMPLES)
    )
    return (
        '<h2 style="margin-top:24px;">Draftscope</h2>'
        "<p>Chat with a model on this computer. Answers come faster by drafting: likely next words are "
        "guessed (from your datastore, this conversation, the model's earlier answers) and the model "
        "checks them all in one step, so what it writes is exactly what it would have written alone. "
        "View ▸ Show all inspection panels shows each step.</p>"
        f"<p>Try one:</p>{links}"
        '<p><small style="color:gray;">Help ▸ Guide says more.</small></p>'
    )


def use_example(window, number: int) -> None:
    """Put example ``number`` in the message box (and, for a file's question, open the attach dialog)."""
    if not 0 <= number < len(EXAMPLES) or window.streaming:
        return
    example = EXAMPLES[number]
    window.composer.restore(example.prompt, window.composer.attachments)  # files already attached stay
    if example.attach and not window.composer.attachments:
        window.composer.choose_files()
