"""Continue in the window: the link under a cut answer, and that answer written on in place.

The transcript offers Continue under the conversation's last answer when it was cut (at the length
limit, stopped as a loop or by the user) and can go on, by the running model (core/continuation.py:
after a switch to a model with another vocabulary its tokens are not this model's). While it is written
on, it is the answer being streamed, in the transcript and the panels alike: its steps so far, then
the new ones (so a token's step is the same index live and once stored)."""

from __future__ import annotations

from collections.abc import Callable

from draftscope.core.continuation import by_running_model, can_continue
from draftscope.core.words import sentence
from draftscope.engine.events import StepEvent, step_from_dict


class Continuing:
    """What the transcript knows of Continue: which answer offers it, which one is being written on."""

    def __init__(self, session) -> None:
        self.session = session
        self.message_id: int | None = None  # the answer being written on (None: a new answer, or none)
        self.prefix = ""  # its text before this continuation
        self._checked: tuple = ((), False)  # ((answer id, its text, the tokenizer), whether it offers Continue)
        self.opens_call: Callable[[str], bool] = lambda text: False  # the window's tool loop's (tools offered)

    def begin(self) -> list[StepEvent]:
        """An answer starts streaming (a continuation when the session's request is one): its steps so far."""
        going_on = self.session.continuing
        self.message_id = going_on.message_id if going_on is not None else None
        self.prefix = going_on.text if going_on is not None else ""
        return steps_so_far(going_on)

    def end(self) -> None:
        self.message_id, self.prefix = None, ""

    def shown(self, messages: list, *, streaming: bool) -> tuple[list, int | None]:
        """The messages to show (the answer being written on is the streamed one meanwhile), and the
        id of the answer that offers Continue (None: none does)."""
        if streaming:
            return [m for m in messages if m.id != self.message_id], None
        last = messages[-1] if messages else None
        if last is None or not self._offers(last):
            return messages, None
        return messages, last.id

    def _offers(self, message) -> bool:
        session = self.session
        if message.tool_fields or self.opens_call(message.content):  # it called, or opened a call: no prose
            return False  # to write on (a continuation would not read it as a call)
        has_steps = session.history.has_steps(message.id)
        if not can_continue(message, has_steps=has_steps, max_context=session.engine.max_context):
            return False
        # Asked again only when the answer, its text or the tokenizer changed: it decodes the answer's
        # tokens, and the transcript renders often.
        key = (message.id, message.content, session.engine.tokenizer)
        if self._checked[0] != key:
            self._checked = (key, by_running_model(session, message))
        return self._checked[1]


def continue_answer(window, message_id: int) -> None:
    """The Continue link: write on the answer (the same message), or say why it cannot be."""
    if window.streaming:
        return
    try:
        request = window.session.continue_request(message_id, tools=window.tool_loop.offered())  # as first shown
    except ValueError as exc:  # not the last answer, no room left in the context: said, nothing changes
        window.warn(sentence(str(exc)), "continueErrorDialog")
        return
    window.composer.end_edit()

    def panels_follow_on() -> None:  # after they are cleared for the new answer: its steps so far first
        window.answer_signals.answer_started.disconnect(panels_follow_on)
        window.inspection.add_live(steps_so_far(window.session.continuing))

    window.answer_signals.answer_started.connect(panels_follow_on)
    window._generate(request=request)


def steps_so_far(going_on) -> list[StepEvent]:
    """The steps of the answer being continued (none for a new answer)."""
    return [step_from_dict(d) for d in going_on.steps] if going_on is not None else []
