"""The model's learned answers: they grow with each answer, draft what the model said before,
survive a restart, can be cleared, and a damaged file is repaired rather than fatal."""

import numpy as np
from engine_fixtures import IdTokenizer, tiny_llama

from draftscope.core.drafter_factory import setup_drafters
from draftscope.draft_tree import DraftSource
from draftscope.drafters.learned import LearnedStore, Learner
from draftscope.engine.engine import Engine, GenerationRequest

VOCAB = 64
HEADER = [1, 2, 3, 4]  # "assistant header" tokens ending every prompt


def answer(seed, n=30):
    return np.random.default_rng(seed).integers(5, VOCAB, n).tolist()


def test_answers_are_learned_in_the_background_and_drafted_later(tmp_path):
    store = LearnedStore("tiny", VOCAB, tmp_path)
    learner = Learner(store)
    said = answer(1)
    learner.submit([9, 9] + HEADER, said)
    assert learner.wait_idle()
    assert store.stats().answers == 1 and store.stats().indexed_answers == 1
    setup = setup_drafters("learned", datastore=None, learned=store)
    (drafter,) = setup.make()
    assert drafter.name == "learned"
    # A new answer that starts the same way: the learned drafter continues it as it went before.
    context = [7] + HEADER + said[:6]
    tree = drafter.propose(context, 16)
    assert len(tree) and (tree.source == DraftSource.LEARNED).all()
    assert tree.token_path(int(np.argmax(tree.depth))) == said[6 : 6 + tree.max_depth]
    learner.close()


def test_learned_answers_survive_a_restart_and_can_be_cleared(tmp_path):
    store = LearnedStore("tiny", VOCAB, tmp_path)
    learner = Learner(store)
    for seed in range(5):
        learner.submit(HEADER, answer(seed))
    assert learner.wait_idle()
    learner.close()
    again = LearnedStore("tiny", VOCAB, tmp_path)  # the app started again
    assert again.stats().answers == 5 and again.stats().tokens == 5 * (30 + 4)
    assert again.reader() is not None and again.reader().document_count == 5
    assert "5 answers" in again.stats().describe()
    learner = Learner(again)
    learner.clear()
    assert learner.wait_idle()
    assert again.stats().answers == 0 and again.reader() is None
    assert LearnedStore("tiny", VOCAB, tmp_path).stats().answers == 0, "cleared on disk, not only in memory"
    learner.close()


def test_a_damaged_index_is_rebuilt_and_a_torn_record_dropped(tmp_path):
    store = LearnedStore("tiny", VOCAB, tmp_path)
    for seed in range(3):
        store.add(HEADER, answer(seed))
    store.rebuild()
    store.index.write_bytes(b"not an index at all")
    with open(store.corpus, "ab") as f:  # a crash in the middle of writing a fourth answer
        f.write((50).to_bytes(4, "little") + b"\x07\x00")
    reopened = LearnedStore("tiny", VOCAB, tmp_path)
    assert reopened.stats().answers == 3 and reopened.needs_rebuild()
    learner = Learner(reopened)  # rebuilds at start, in the background
    assert learner.wait_idle()
    assert reopened.reader() is not None and reopened.reader().document_count == 3
    learner.submit(HEADER, answer(9))  # the torn tail is cut before the new record
    assert learner.wait_idle()
    assert LearnedStore("tiny", VOCAB, tmp_path).stats().answers == 4
    assert any("damaged" in p for p in reopened.problems)
    learner.close()


def test_ids_outside_the_vocabulary_are_not_learned(tmp_path):
    store = LearnedStore("tiny", VOCAB, tmp_path)
    assert not store.add(HEADER, [VOCAB + 5])
    assert not store.add(HEADER, [])
    assert store.stats().answers == 0


def test_greedy_output_is_unchanged_with_learning_on(tmp_path):
    """Every drafter mix that includes learned answers gives exactly the plain greedy tokens."""
    model = tiny_llama(VOCAB, seed=11, layers=2, hidden=32)
    engine = Engine(model, IdTokenizer())
    engine.eos_ids = set()
    store = LearnedStore("tiny", VOCAB, tmp_path)
    prompts = [[5 + i, 6, 7] + HEADER for i in range(3)]
    plain = [list(engine.generate(GenerationRequest(prompt_ids=p, max_new_tokens=24)))[-1].token_ids for p in prompts]
    for p, out in zip(prompts, plain):  # the model's own answers: its greedy continuations are in the store
        store.add(p, out)
    store.rebuild()
    from draftscope.retrieval import Writer

    other = tmp_path / "other.idx"
    with Writer(other, VOCAB) as w:
        for seed in range(10):
            w.add_entry(answer(seed, 40))
    draft = tiny_llama(VOCAB, seed=12, layers=1, hidden=32)
    for mix in (
        "learned",
        "learned,context",
        "retrieval,learned,context",
        "learned,model",
        "retrieval,learned,context,model",
    ):
        make = setup_drafters(mix, datastore=other, learned=store, draft_model=draft).make
        for p, out in zip(prompts, plain):
            # A fixed budget: the step policy's timing-driven choices are not what is tested here.
            events = list(
                engine.generate(GenerationRequest(prompt_ids=p, max_new_tokens=24, drafters=make(), budget=16))
            )
            assert events[-1].token_ids == out, mix
            if mix == "learned":
                assert sum(e.accepted for e in events[:-1]) > 10, "the learned answers were drafted and accepted"
