"""Paging an answer's versions (the "‹ 2 / 3 ›" under an answer Regenerate answered again): the
shown version becomes the conversation's, and the inspection panels follow it."""

from __future__ import annotations

from draftscope.engine.events import step_from_dict


def page_to(window, message_id: int) -> None:
    """Show version ``message_id`` of its answer: the chat repaints with its branch (the turns that
    followed it), the next message continues from it, and the panels show its steps when they
    showed another version of it (or, when what they showed left the chat, the last answer's)."""
    if window.streaming or window.conversation_id is None:
        return
    shown = window.inspection.answer
    window.session.show_version(message_id)
    window.chat_view.render()
    messages = window.history.messages(window.conversation_id)
    page = next((m for m in messages if m.id == message_id), None)
    if page is None or shown is None or shown == message_id:
        return
    if shown in page.versions:
        window.answer_selected.emit(message_id, [step_from_dict(d) for d in window.history.steps(message_id)])
    elif all(m.id != shown for m in messages):
        window.inspection.show_latest(window.history, window.conversation_id, window.engine.baseline_tokens_per_second)
