"""Several answers on one llama.cpp model at once (issue 33): each answer holds a slot (its own cache
sequences) and the steps of the answers in progress share one forward (that each is the answer
alone is test_backend_contract.py's, for every backend). Answers beyond the slots wait (and can be
cancelled while waiting); trees keep within a slot's leaves; the server answers ``parallel``
requests at once."""

from __future__ import annotations

import threading
import time

import numpy as np
import openai
import pytest
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp

need_llama_cpp()

from engine_fixtures import pin_budget, tiny_llama
from gguf_fixtures import write_tiny_gguf
from runtime_helpers import runtime_for
from threaded_answers import (
    PROMPTS,
    answer,
    ids_of,
)

from draftscope.draft_tree import DraftSource, DraftTree, limit_leaves
from draftscope.drafters import (
    ContextDrafter,
    Drafter,
)
from draftscope.engine.backends import open_backend
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.server import ServerConfig, ServerThread, create_app


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    # peaked: sampled answers repeat themselves too; room for the bench's questions
    model = tiny_llama(len(tokenizer), seed=3, sharpen=32.0, max_positions=1024)
    return write_tiny_gguf(tmp_path_factory.mktemp("parallel") / "tiny-F32.gguf", model, tokenizer_dir)


def engine_with(gguf, slots: int) -> Engine:
    engine = Engine(backend=open_backend(str(gguf), backend="llama.cpp", slots=slots))
    engine.eos_ids = set()  # every answer runs to its length
    return engine


@pytest.fixture(scope="module")
def alone(gguf):
    engine = engine_with(gguf, 1)
    yield engine
    engine.backend.close()


@pytest.fixture(scope="module")
def shared(gguf):
    engine = engine_with(gguf, 4)
    yield engine
    engine.backend.close()


def test_an_answer_beyond_the_slots_waits_and_can_be_cancelled_while_it_waits(alone, tokenizer):
    holder_has_it, done = threading.Event(), threading.Event()

    def hold():  # another thread holds the only slot (as a head's training reads rows in one)
        with alone.stepper.lease():
            holder_has_it.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    holder_has_it.wait(5)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    final = list(
        alone.generate(GenerationRequest(prompt_ids=ids_of(tokenizer, PROMPTS[0]), max_new_tokens=8, cancel=cancel))
    )[-1]
    assert final.finish_reason == "cancel" and final.token_ids == [] and 0.25 < time.monotonic() - t0 < 5
    done.set()
    holder.join()
    final = answer(alone, ids_of(tokenizer, PROMPTS[0]), SamplingParams(), drafted=False, tokens=8)
    assert final.error is None and len(final.token_ids) == 8, "the slot was not given back"


def test_an_answer_left_paused_holds_its_slot_and_frees_it_when_dropped(shared, tokenizer):
    """The stepper runs an answer at most MAX_LEAD steps ahead of its reader: one left paused stops
    there, holding its slot, while another answer runs beside it; dropping it frees the slot."""
    import gc

    from draftscope.engine.stepper import MAX_LEAD

    ids = ids_of(tokenizer, PROMPTS[1])
    paused = shared.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=40))
    first = next(paused)  # one step, then left as it is
    assert shared.stepper.busy == 1
    final = list(shared.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=20, drafters=[ContextDrafter()])))[-1]
    assert final.error is None and len(final.token_ids) == 20, "the other answer did not run beside the paused one"
    assert shared.stepper.busy == 1, "the paused answer lost its slot"
    rest = [next(paused) for _ in range(MAX_LEAD)]  # what it said ahead of its reader is there to read
    assert first.tokens_total < rest[-1].tokens_total < 40
    del paused, rest
    gc.collect()  # a dropped generator is closed: its answer leaves at the next round
    deadline = time.monotonic() + 5
    while shared.stepper.busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shared.stepper.busy == 0


def test_a_tree_keeps_within_the_leaves_a_slot_has():
    # eight first-level candidates, the first of them with a chain below it
    parents = np.array([-1] * 8 + [0, 8], np.int32)
    tree = DraftTree(
        np.arange(10, 20),
        parents,
        np.array([1] * 8 + [2, 3], np.int32),
        np.ones(10, np.float32),
        np.full(10, DraftSource.RETRIEVAL, np.int8),
    )
    cut = limit_leaves(tree, 3)
    assert len(cut.leaves()) == 3 and cut.tokens.tolist() == [10, 11, 12, 18, 19]
    assert limit_leaves(tree, 8) is tree


def test_each_slot_keeps_its_conversation_and_its_follow_up_comes_back_to_it(gguf, tokenizer):
    """Two conversations in two slots: each follow-up is admitted into the slot holding its
    conversation and reads only what is new; a third, new conversation takes the slot used least
    recently, not the one just answered."""
    engine = engine_with(gguf, 8)
    backend = engine.backend
    try:
        assert backend.leaves == 32 and engine.stepper.size == 8
        a, b = ids_of(tokenizer, PROMPTS[2]), ids_of(tokenizer, PROMPTS[0])
        first_a = answer(engine, a, SamplingParams(), drafted=True, tokens=12)
        first_b = answer(engine, b, SamplingParams(), drafted=True, tokens=12)
        slot_a = next(s for s in range(8) if backend.held_tokens(s)[: len(a)] == a)
        slot_b = next(s for s in range(8) if backend.held_tokens(s)[: len(b)] == b)
        assert slot_a != slot_b, "the second conversation pushed out the first one's cache"
        for prompt, final, slot in ((a, first_a, slot_a), (b, first_b, slot_b)):
            follow_up = prompt + final.token_ids + ids_of(tokenizer, " and then")
            again = answer(engine, follow_up, SamplingParams(), drafted=True, tokens=6)
            assert again.stats.prompt_kept == len(prompt) + len(final.token_ids) - 1
            assert backend.held_tokens(slot)[: len(follow_up)] == follow_up
    finally:
        backend.close()


def test_slots_out_of_range_are_refused_in_words(gguf):
    with pytest.raises(ValueError, match="slots .answers at once. must be between 1 and 256"):
        LlamaCppBackend(gguf, None, slots=0)


# ---------------------------------------------------------------- the server


class SlowContext(ContextDrafter):
    """The conversation's drafts, a little slowly: answers last long enough to overlap."""

    def propose(self, context_ids, budget):
        time.sleep(0.02)
        return super().propose(context_ids, budget)


def test_the_server_answers_parallel_requests_at_once_and_queues_beyond(gguf, tokenizer):
    engine = engine_with(gguf, 2)
    app = create_app(
        runtime_for(engine, max_new_tokens=40, drafters=lambda: [SlowContext()]),
        history=None,
        config=ServerConfig(parallel=2, queue_limit=1, budget=4),  # the server asks generate_async
    )
    server = ServerThread(app, port=0).start()
    order, lock = [], threading.Lock()  # the stepper's admissions and releases, in the order they happened
    admit, release = engine.stepper._best_free, engine.stepper._release

    def logged_admit(prompt):
        with lock:
            order.append(("acquire", len(prompt)))
        return admit(prompt)

    def logged_release(slot):
        with lock:
            order.append(("release", slot))
        release(slot)

    engine.stepper._best_free, engine.stepper._release = logged_admit, logged_release
    try:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
        spans, errors = {}, []

        def ask(i):
            try:
                t0 = time.monotonic()
                stream = client.chat.completions.create(
                    model="m",
                    max_tokens=40,
                    stream=True,
                    temperature=0,
                    messages=[{"role": "user", "content": PROMPTS[i]}],
                )
                times = [time.monotonic() for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
                spans[i] = (t0, times[0], times[-1])
            except openai.RateLimitError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        while engine.stepper.busy < 2:
            time.sleep(0.005)
        third = threading.Thread(target=ask, args=(2,))  # waits in the queue
        third.start()
        time.sleep(0.1)
        ask(3)  # one too many: 2 answering, 1 waiting
        for t in [*threads, third]:
            t.join(timeout=60)
        assert len(errors) == 1 and errors[0].body["code"] == "queue_full", errors
        (_a0, a_first, a_last), (_b0, b_first, b_last) = spans[0], spans[1]
        assert a_first < b_last and b_first < a_last, "the two answers did not stream at the same time"
        # the queued request took its slot only after an answer gave one back (an order, not a timing)
        kinds = [kind for kind, _ in order]
        assert kinds.count("acquire") == 3, order
        third_acquire = [i for i, kind in enumerate(kinds) if kind == "acquire"][2]
        assert "release" in kinds[:third_acquire], f"the queued request started before a slot was free: {order}"
    finally:
        server.stop()
        engine.backend.close()


def test_bench_serve_measures_concurrent_clients_through_the_openai_client(gguf, tmp_path, capsys):
    import json

    from draftscope.cli import main

    out = tmp_path / "serve.json"
    questions = tmp_path / "questions.jsonl"  # short ones: the tiny model reads 1,024 tokens
    questions.write_text(
        "".join(json.dumps({"question_id": i, "category": "qa", "turns": [p]}) + "\n" for i, p in enumerate(PROMPTS))
    )
    code = main(
        [
            "bench",
            "serve",
            "--model",
            str(gguf),
            "--questions",
            str(questions),
            "--clients",
            "1,3",
            "--requests",
            "2",
            "--max-new-tokens",
            "40",
            "--servers",
            "ours-plain,ours-drafting",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    rows = json.loads(out.read_text())
    assert [(r["server"], r["clients"]) for r in rows] == [
        ("ours-plain", 1),
        ("ours-plain", 3),
        ("ours-drafting", 1),
        ("ours-drafting", 3),
    ]
    for r in rows:  # every client's two answers streamed tokens (at most 40 each: long enough to overlap,
        # for no answer waits for another to join its forward)
        assert r["errors"] == [], r["errors"]
        assert 2 * r["clients"] <= r["tokens"] <= 40 * 2 * r["clients"] and r["tokens_per_s"] > 0, r
    assert "| ours-plain | 3 |" in text and "draftscope serve --parallel 3" in text, text
    # how many answers the forwards held, from the answers' own stats: one alone, more with three clients
    assert all(r["answers_per_forward"] == 1.0 for r in rows if r["clients"] == 1), rows
    assert all(r["answers_per_forward"] > 1.5 for r in rows if r["clients"] == 3), rows


def test_bench_serve_clients_can_arrive_on_a_seeded_poisson_schedule():
    from draftscope.bench.serve_clients import arrival_times

    assert arrival_times(3, None) == [0.0, 0.0, 0.0]
    times = arrival_times(200, 0.5, seed=1)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] == 0.0 and all(g >= 0 for g in gaps) and times == arrival_times(200, 0.5, seed=1)
    assert 0.4 < sum(gaps) / len(gaps) < 0.6  # the mean gap asked for


def test_bench_serve_counts_the_rate_while_every_answer_decodes_apart_from_prompts_and_ramps():
    """The batch curve bounds decoding: the figure set against it leaves out the time before the
    last answer's first token and after the first answer's last."""
    from draftscope.bench.serve_clients import all_decoding_rate

    # answer A: first token at 0, then a token every 0.1 s until 2.0; B starts at 1.0 (its prompt read
    # meanwhile), a token every 0.1 s until 3.0: both decode from 1.0 to 2.0
    a = [(round(0.1 * k, 1), 1) for k in range(21)]
    b = [(round(1.0 + 0.1 * k, 1), 1) for k in range(21)]
    assert all_decoding_rate([a, b], 2) == pytest.approx(20 / 1.0)  # 10 tokens each in (1.0, 2.0]
    assert all_decoding_rate([a, b[:1]], 2) is None  # B's single arrival: never both decoding
    # the whole round's aggregate is lower: 42 tokens over 3 s
    assert 42 / 3.0 < all_decoding_rate([a, b], 2)


def test_the_server_under_eight_clients_answers_each_with_its_own_text(gguf, tokenizer):
    engine = engine_with(gguf, 2)
    app = create_app(
        runtime_for(engine, max_new_tokens=24), history=None, config=ServerConfig(parallel=2, queue_limit=8)
    )
    server = ServerThread(app, port=0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
        asks = [PROMPTS[i % 4] + f" {i}" for i in range(8)]

        def ask(text):
            return client.chat.completions.create(
                model="m", max_tokens=24, temperature=0, seed=1, messages=[{"role": "user", "content": text}]
            )

        alone = [ask(a).choices[0].message.content for a in asks]  # one at a time
        got = [None] * 8

        def worker(i):
            got[i] = ask(asks[i]).choices[0].message.content

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert all(g is not None for g in got), "a client got no answer"
        # each client its own answer: the one its question gets alone (no texts mixed up)
        assert got == alone, "an answer decoded beside others is not the one it gets alone"
    finally:
        server.stop()
        engine.backend.close()


def test_a_client_that_disconnects_frees_its_slot(gguf, tokenizer):
    import httpx2 as httpx

    engine = engine_with(gguf, 2)
    pin_budget(engine, 4)
    app = create_app(
        runtime_for(engine, max_new_tokens=200, drafters=lambda: [SlowContext()]),
        history=None,
        config=ServerConfig(parallel=2),
    )
    server = ServerThread(app, port=0).start()
    try:
        body = {"model": "m", "stream": True, "max_tokens": 200, "messages": [{"role": "user", "content": "go"}]}
        with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=30) as r:
            for _ in r.iter_lines():
                if engine.stepper.busy == 1:
                    break
        deadline = time.monotonic() + 5
        while engine.stepper.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.stepper.busy == 0, "the slot of a client that went away was not freed"
    finally:
        server.stop()
        engine.backend.close()


def test_a_released_slot_keeps_its_cache_for_the_next_turn(shared, tokenizer):
    ids = ids_of(tokenizer, PROMPTS[3])
    final = answer(shared, ids, SamplingParams(), drafted=False, tokens=8)
    assert shared.stepper.busy == 0
    held = [shared.backend.held_tokens(s) for s in range(shared.stepper.size)]
    assert ids + final.token_ids[:-1] in held, "the answer's slot was emptied when it was given back"


class LongChainDrafter(Drafter):
    """Drafts a 100-node chain whatever budget it is given: more than a shared forward takes."""

    name, source = "context", DraftSource.CONTEXT

    def reset(self, context_ids):
        pass

    def propose(self, context_ids, budget):
        from draftscope.draft_tree import chain_tree

        return chain_tree([(context_ids[-1] + k) % 50 + 3 for k in range(100)])

    def observe(self, accepted_ids):
        pass


@pytest.mark.parametrize(
    "params", [SamplingParams(), SamplingParams(temperature=0.9, top_p=0.95, seed=7)], ids=["greedy", "T0.9"]
)
def test_a_budget_beyond_what_a_shared_forward_takes_cuts_the_trees_to_fit(shared, tokenizer, params):
    """``--budget 100`` with answers at once: every drafted answer failed ("at most 64"); now its
    trees are cut to the 64 nodes a slot's verify takes, and the answer is plain decoding's."""
    ids = ids_of(tokenizer, PROMPTS[0])
    # read afresh, both: a cache kept from the tests before was computed in other batch shapes
    plain = list(
        shared.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=80, sampling=params, keep_cache=False))
    )[-1]
    events = list(
        shared.generate(
            GenerationRequest(
                prompt_ids=ids,
                max_new_tokens=80,
                sampling=params,
                keep_cache=False,
                drafters=[LongChainDrafter()],
                budget=100,
            )
        )
    )
    final = events[-1]
    assert final.error is None, final.error
    sizes = [len(e.tree.tokens) for e in events[:-1] if getattr(e, "tree", None) is not None]
    assert sizes and max(sizes) == 64, sizes
    assert_plain_or_near_tie(shared, ids, plain.token_ids, final.token_ids, params)


class BushyDrafter(LongChainDrafter):
    """Drafts 100 children of the root whatever budget it is given: 100 leaves, more than the 64
    sequence ids a llama.cpp tree may use."""

    def propose(self, context_ids, budget):
        return DraftTree(
            np.array([(context_ids[-1] + k) % 50 + 3 for k in range(100)], np.int64),
            np.full(100, -1, np.int32),
            np.ones(100, np.int32),
            np.ones(100, np.float32),
            np.full(100, DraftSource.CONTEXT, np.int8),
        )


def test_a_bushy_tree_under_a_large_budget_is_cut_to_the_leaves_one_answer_has(alone, tokenizer):
    """``--budget 100`` with one slot: a 100-leaf tree ended the answer ("a draft tree of 100 leaves;
    llama.cpp verifies at most 64"); it is cut to the slot's leaves and the answer is plain decoding's."""
    ids = ids_of(tokenizer, PROMPTS[1])
    plain = list(alone.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=20, keep_cache=False)))[-1]
    events = list(
        alone.generate(
            GenerationRequest(
                prompt_ids=ids, max_new_tokens=20, keep_cache=False, drafters=[BushyDrafter()], budget=100
            )
        )
    )
    final = events[-1]
    assert final.error is None, final.error
    sizes = [len(e.tree.tokens) for e in events[:-1] if getattr(e, "tree", None) is not None]
    assert sizes and max(sizes) == alone.backend.leaves == 64, sizes
    assert_plain_or_near_tie(alone, ids, plain.token_ids, final.token_ids, SamplingParams())
