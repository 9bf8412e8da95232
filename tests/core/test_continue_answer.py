"""Continue (issue 62): an answer cut at the length limit, written on, is the answer an uncut run
with a larger limit writes, token for token, greedy and sampled (fp32 tiny model), and stays one
message (its text, steps and figures extended). Continuing differently (a new seed, or the partial
answer rendered back through the chat template as a finished turn) gives another answer, which the
check below rejects."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for
from tokenizer_fixture import make_tokenizer_folder

from draftscope.core.continuation import answer_tokens, joined_stats, written_by
from draftscope.core.session import ChatSession
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.storage import HistoryStore

QUESTION = "Tell me about the quick brown fox."
CUT, WHOLE = 12, 24


@pytest.fixture(scope="module")
def engine(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, layers=1, hidden=32, max_positions=512), tokenizer, name="tiny")
    engine.eos_ids = set()  # every answer runs to its limit
    return engine


def session_on(engine, tmp_path, temperature: float, name: str = "h.sqlite3") -> ChatSession:
    runtime = runtime_for(engine, max_new_tokens=CUT, temperature=temperature, seed=-1, stop_loops=False)
    return ChatSession(runtime, history=HistoryStore(tmp_path / name))


def uncut(engine, tmp_path, temperature: float, seed: int | None):
    """The reference: one plain answer with the larger limit and the cut answer's seed."""
    session = session_on(engine, tmp_path, temperature, "uncut.sqlite3")
    session.say(QUESTION)
    request = session.request(max_new_tokens=WHOLE, drafters=[])
    request.sampling = replace(request.sampling, seed=seed)
    return session.run(request)


def written_on(engine, prompt: list[int], sampling, tokens_so_far: list[int]) -> list[int]:
    """What continuing from ``prompt`` writes after ``tokens_so_far`` (for the wrong variants)."""
    request = GenerationRequest(prompt_ids=prompt, max_new_tokens=WHOLE - CUT, sampling=sampling)
    *_, final = engine.generate(request)
    return tokens_so_far + final.token_ids


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_a_continued_answer_is_the_uncut_answer_token_for_token(engine, tmp_path, temperature):
    session = session_on(engine, tmp_path, temperature)
    session.say(QUESTION)
    cut = session.run(session.request())
    message = session.last_kept
    assert cut.finish_reason == "length" and len(cut.token_ids) == CUT
    assert (cut.stats.seed is None) == (temperature == 0)

    continued = session.run(session.continue_request(message))

    reference = uncut(engine, tmp_path, temperature, cut.stats.seed)
    stored = session.history.messages(session.conversation_id)
    tokens = answer_tokens(session.history.steps(message))
    assert [m.role for m in stored] == ["user", "assistant"] and stored[-1].id == message == session.last_kept
    assert tokens == cut.token_ids + continued.token_ids == reference.token_ids, "the uncut answer, token for token"
    # A cut may split a character's bytes: the cut text then ends in U+FFFD, which the whole text completes.
    assert stored[-1].content == reference.text and stored[-1].content.startswith(cut.text.rstrip("\ufffd"))
    stats = stored[-1].stats
    assert stats["tokens"] == WHOLE and stats["finish_reason"] == "length" and stats["seed"] == cut.stats.seed
    numbers = [s["step"] for s in session.history.steps(message)]
    assert numbers == list(range(1, len(numbers) + 1)), "the new steps are numbered on"

    # Continuing any other way writes another answer, which the comparison above rejects.
    before = engine.encode_chat([{"role": "user", "content": QUESTION}])
    sampling = session.continue_request(message).sampling  # what Continue uses (the answer's seed)
    as_a_turn = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": cut.text}], tokenize=False
    )
    rendered = engine.tokenizer(as_a_turn, add_special_tokens=False)["input_ids"]
    assert written_on(engine, rendered, sampling, cut.token_ids) != reference.token_ids
    if temperature:
        other_seed = replace(sampling, seed=cut.stats.seed + 1)
        assert written_on(engine, before + cut.token_ids, other_seed, cut.token_ids) != reference.token_ids
    assert written_on(engine, before + cut.token_ids, sampling, cut.token_ids) == reference.token_ids


def test_only_a_cut_last_answer_with_its_tokens_can_be_continued(engine, tmp_path):
    session = session_on(engine, tmp_path, 0.0)
    session.say(QUESTION)
    session.run(session.request())
    first = session.last_kept
    session.say("And then?")
    session.run(session.request())
    with pytest.raises(ValueError, match="last answer"):
        session.continue_request(first)
    history = session.history
    imported = history.add_message(session.conversation_id, "user", "An imported question")
    imported = history.add_message(session.conversation_id, "assistant", "no steps", stats={"finish_reason": "length"})
    with pytest.raises(ValueError, match="cannot be continued"):
        session.continue_request(imported)
    next_request = session.request()
    assert session.continuing is None and next_request.stop_loops is False  # as the settings say


def test_the_figures_of_a_continued_answer_cover_both_parts():
    old = {"tokens": 12, "steps": 6, "elapsed_s": 1.0, "decode_tokens_per_second": 10.0, "speedup_estimate": 1.5}
    old |= {"time_to_first_token_ms": 50.0, "prompt_tokens": 30, "busy": False, "finish_reason": "length"}
    new = {"tokens": 12, "steps": 4, "elapsed_s": 2.0, "decode_tokens_per_second": 30.0, "speedup_estimate": 0.5}
    new |= {"time_to_first_token_ms": 5.0, "prompt_tokens": 42, "busy": True, "finish_reason": "eos"}
    both = joined_stats(old, new)
    assert both["tokens"] == 24 and both["steps"] == 10 and both["tau"] == 2.4 and both["tokens_per_second"] == 8.0
    assert both["decode_tokens_per_second"] == pytest.approx(24 / (12 / 10 + 12 / 30))  # each part at its own rate
    assert both["speedup_estimate"] == pytest.approx(24 / (12 / 1.5 + 12 / 0.5))
    assert both["time_to_first_token_ms"] == 50.0 and both["prompt_tokens"] == 30, "the answer's first wait, prompt"
    assert both["busy"] is True and both["finish_reason"] == "eos"


@pytest.fixture(scope="module")
def other_engine(tmp_path_factory):
    """Another model with another vocabulary (its tokenizer trained on more text: other merges, other ids)."""
    from transformers import AutoTokenizer

    extra = ("Continuing an answer of another model would feed this one garbage.",)
    folder = make_tokenizer_folder(tmp_path_factory.mktemp("other-tokenizer"), extra_text=extra)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    engine = Engine(tiny_llama(len(tokenizer), seed=4, layers=1, hidden=32, max_positions=512), tokenizer, name="other")
    engine.eos_ids = set()
    return engine


def test_an_answer_of_another_model_is_not_continued(engine, other_engine, tmp_path):
    """After a model switch the stored tokens are the old vocabulary's: Continue is refused in words,
    and the answer stays as it was (no garbage fed, no text decoded by the wrong tokenizer)."""
    session = session_on(engine, tmp_path, 0.0)
    session.say(QUESTION)
    cut = session.run(session.request())
    message = session.last_kept
    tokens = answer_tokens(session.history.steps(message))
    assert other_engine.tokenizer.decode(tokens, skip_special_tokens=True) != cut.text, "the switch changes the text"

    switched = ChatSession(
        runtime_for(other_engine, max_new_tokens=CUT, temperature=0.0, seed=-1, stop_loops=False),
        history=session.history,
        conversation_id=session.conversation_id,
    )
    with pytest.raises(ValueError, match="written by another model; Regenerate instead"):
        switched.continue_request(message)
    assert switched.continuing is None
    stored = session.history.messages(session.conversation_id)[-1]
    assert stored.content == cut.text and answer_tokens(session.history.steps(message)) == tokens

    session.continue_request(message)  # the model that wrote it still may
    assert written_by(engine.tokenizer, " " + cut.text + "\n", tokens), "whitespace at the ends is not compared"


def test_a_continued_answers_steps_run_on_in_time_and_tau(engine, tmp_path):
    """Live and stored, the new part's steps are the whole answer's: time since the answer began runs
    on (the speedup panel's x axis would otherwise draw the new part over the old), and tau counts both."""
    session = session_on(engine, tmp_path, 1.0)
    session.say(QUESTION)
    session.run(session.request())
    message = session.last_kept
    live = []
    session.events.step.connect(live.append)
    session.run(session.continue_request(message))

    stored = session.history.steps(message)
    elapsed = [s["elapsed_ms"] for s in stored]
    assert all(a <= b for a, b in zip(elapsed, elapsed[1:])), elapsed
    last = stored[-1]
    assert last["tokens_total"] == WHOLE and last["steps_total"] == len(stored)
    assert last["tau"] == pytest.approx(WHOLE / len(stored))
    assert last["tokens_per_second"] == pytest.approx(WHOLE / (last["elapsed_ms"] / 1000))
    assert [ev.elapsed_ms for ev in live] == elapsed[-len(live) :], "the panels hear what is kept"
    assert [ev.tau for ev in live] == [s["tau"] for s in stored[-len(live) :]]
