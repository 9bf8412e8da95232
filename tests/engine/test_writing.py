"""An answer's text as said, step by step (engine/writing.py): the accepted drafts and the target's
token, cut at the length limit, at an end-of-sequence token and before a stop string."""

from __future__ import annotations

from engine_fixtures import IdTokenizer

from draftscope.draft_tree import chain_tree
from draftscope.engine.detokenizer import Detokenizer
from draftscope.engine.writing import Writing

TREE = chain_tree([7, 8, 9])  # drafts of the retrieval source, a chain


def writing(limit: int = 10, **fields) -> Writing:
    return Writing(ids=[1, 2, 3], limit=limit, detok=Detokenizer(IdTokenizer()), **fields)


def test_a_step_says_the_accepted_drafts_then_the_targets_token():
    text = writing()

    said = text.say(TREE, [0, 1], 5)

    assert said.tokens == [7, 8, 5] and said.pieces == [" 7", " 8", " 5"] and not said.stop
    assert said.provenance == ["retrieval", "retrieval", "target"]
    assert text.ids == [1, 2, 3, 7, 8, 5] and text.by_source == {"retrieval": 2}


def test_an_end_of_sequence_token_ends_the_answer_after_it():
    text = writing(eos_ids={8})

    said = text.say(TREE, [0, 1, 2], 5)

    assert said.tokens == [7, 8] and said.stop and text.finish == "eos"


def test_the_length_limit_cuts_the_step_and_leaves_no_room():
    text = writing(limit=2)

    said = text.say(TREE, [0, 1, 2], 5)

    assert said.tokens == [7, 8] and text.left == 0 and text.finish == "length"


def test_a_stop_string_ends_the_answer_and_is_never_said():
    text = writing(stops=[" 8"])

    said = text.say(TREE, [0, 1, 2], 5)

    assert said.stop and text.finish == "stop"
    assert "".join(said.pieces) == " 7" and text.final_text(IdTokenizer()) == " 7"
