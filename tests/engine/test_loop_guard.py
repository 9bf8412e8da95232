"""The loop guard (issue 62): an answer that says one unit over and over, back to back, ends with
finish "loop" once the repetition is longer than real text writes one; its tokens up to there are
plain decoding's, with or without drafts; and normal text (a table whose rows differ in a cell, a
list of tests, a board of zeros, this project's own docs) is never stopped.

The looping and the normal answers come from a scripted model: a stand-in backend that says a
given text, token by token, whatever the drafts."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_fixtures import Scripted

from draftscope.drafters.context import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent
from draftscope.engine.loop_guard import MIN_SPAN, LoopGuard

ROOT = Path(__file__).resolve().parents[2]
PROMPT = [5, 6, 7, 8]

TABLE = "| n | item | price | state |\n|---|---|---|---|\n" + "".join(
    f"| {i} | item {i} | 0.00 | ok |\n" for i in range(60)
)
TESTS = "".join(f'    assert is_palindrome("{w}") == {w == w[::-1]}\n' for w in map(str, range(100, 160)))
BOARD = "board = [\n" + "    [0, 0, 0, 0, 0, 0, 0, 0],\n" * 8 + "]\n"
CHORUS = "Row, row, row your boat,\ngently down the stream.\n" * 2
NORMAL = "\n".join([TABLE, TESTS, BOARD, CHORUS])


def tokens(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def answer(tokenizer, script, *, stop_loops=True, drafts=False, limit=4000) -> FinalEvent:
    engine = Engine(backend=Scripted(tokenizer, len(PROMPT), script, eos=tokenizer.eos_token_id, vocab=len(tokenizer)))
    request = GenerationRequest(
        prompt_ids=PROMPT,
        max_new_tokens=limit,
        stop_loops=stop_loops,
        drafters=[ContextDrafter()] if drafts else [],
        budget=8 if drafts else None,
    )
    *_, final = engine.generate(request)
    return final


@pytest.mark.parametrize(
    "opening, unit",
    [("Silent moonlit night,\n", "a lone owl, "), ("def test():\n", '    assert is_palindrome("racecar") == True\n')],
)
def test_a_loop_ends_where_its_repetition_is_long_enough_and_its_tokens_are_plain_decodings(tokenizer, opening, unit):
    script = tokens(tokenizer, opening) + tokens(tokenizer, unit) * 400
    plain = answer(tokenizer, script, stop_loops=False, limit=1500)
    assert plain.finish_reason == "length" and len(plain.token_ids) == 1500, "without the guard it loops on"
    for drafts in (False, True):  # drafts accept the loop many tokens a step: the cut is at the same token
        stopped = answer(tokenizer, script, drafts=drafts)
        n = len(stopped.token_ids)
        assert stopped.finish_reason == "loop", drafts
        assert stopped.token_ids == plain.token_ids[:n], "the guard only stops: every token is plain decoding's"
        assert MIN_SPAN <= n < len(tokens(tokenizer, opening)) + MIN_SPAN + len(tokens(tokenizer, unit)), n
        assert stopped.text.endswith(tokenizer.decode(stopped.token_ids[-20:]))
        assert stopped.stats.tokens == n


def test_normal_text_with_similar_rows_is_never_stopped(tokenizer):
    script = tokens(tokenizer, NORMAL)
    final = answer(tokenizer, script, drafts=True)
    assert final.finish_reason == "eos" and final.token_ids[:-1] == script
    for name in ("README.md", "docs/architecture.md", "app/draftscope/engine/sampling.py"):
        guard = LoopGuard()
        assert not any(guard.repeats(t) for t in tokens(tokenizer, (ROOT / name).read_text())), name


def test_the_guard_says_so_as_soon_as_the_span_is_reached_and_keeps_little(tokenizer):
    guard = LoopGuard()
    said = [guard.repeats(t) for t in [1, 2, 3] * 200]
    assert said.index(True) == MIN_SPAN - 1  # the 256th token: 3 + 253 equal to 3 before
    long_unit = list(range(100, 200))  # a paragraph said three times is a loop, twice is not
    guard = LoopGuard()
    said = [guard.repeats(t) for t in long_unit * 3]
    assert said.index(True) == 3 * len(long_unit) - 1
    guard = LoopGuard()
    for t in range(20_000):  # what it keeps is bounded by the longest unit, whatever the answer's length
        guard.repeats(t)
    assert guard.recent.shape == guard.runs.shape == (160,)
    with pytest.raises(ValueError):
        LoopGuard(min_repeats=1)
