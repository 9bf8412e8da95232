"""Paging an answer's versions (the "‹ 2 / 3 ›" under an answer Regenerate answered again): the
shown version becomes the conversation's, and the inspection panels follow it; and the plain word
under a version: the same text again, where a greedy answer departs from version 1 and why, or
that a sampled one was drawn anew."""

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


NEAR_TIE = (
    "at temperature 0 a near-tie between two words can flip when the model's arithmetic differs "
    "(llama.cpp, or a bf16 model, with its cache shaped otherwise)"
)


def first_difference(a: str, b: str) -> int | None:
    """The first word (1-based) where ``b`` departs from ``a``; None when they read the same."""
    left, right = a.split(), b.split()
    if left == right:
        return None
    return next((i + 1 for i, (x, y) in enumerate(zip(left, right)) if x != y), min(len(left), len(right)) + 1)


def version_note(m, first_text: str | None) -> str:
    """A plain word under version ``m`` of an answer (a history Message): the same text as an
    earlier version, and why; or, compared with version 1 (``first_text``), where a greedy answer
    departs from it and why, or that a sampled one was drawn anew. "" for version 1 or an answer
    whose sampling was not kept."""
    if len(m.versions) < 2 or m.versions.index(m.id) == 0:
        return ""
    stats = m.stats or {}
    if "seed" not in stats:
        return f"same text as version {m.same_as}" if m.same_as else ""
    if stats["seed"] is not None:
        again = f" (its text is version {m.same_as}'s)" if m.same_as else ""
        return f"sampled anew with seed {stats['seed']}: a new draw, not the same answer again{again}"
    if m.same_as:
        return (
            f"same text as version {m.same_as} — at temperature 0 the model writes the same answer; raise "
            "the temperature in Settings for a different one"
        )
    word = first_difference(first_text, m.content) if first_text is not None else None
    return f"differs from version 1 at word {word}: {NEAR_TIE}" if word is not None else ""


def first_version_text(history, m) -> str | None:
    """The text of version 1 of ``m``'s answer (None: one version, or it is gone)."""
    if len(m.versions) < 2:
        return None
    if m.versions[0] == m.id:
        return m.content
    # HistoryStore.messages gives the shown branch only: the first version is read by its id
    rows = history._read("SELECT content FROM messages WHERE id = ?", (m.versions[0],))
    return rows[0]["content"] if rows else None
