"""The seeded rule's parts that an answer kept with its seed depends on: the noise at each (seed,
position) is pinned to values written down here (a NumPy whose stream changed would replay kept
answers differently, and this test says so), and distributions over another vocabulary size are
padded or cut as the rule needs."""

import math

import numpy as np
import pytest
import torch

from draftscope.engine.sampling import PositionNoise, SamplingParams, choose, fit_vocab, next_tokens, probabilities

# Gumbel noise G = -log E, E ~ Exp(1) from NumPy's default_rng([seed, position]) (PCG64 seeded by
# SeedSequence, float32 exponentials), first six entries, as computed with NumPy 2.4.6 when the rule
# was pinned (2026-11-25). Seeds are taken mod 2**64 (OpenAI clients may send negative ones).
PINNED = {
    (0, 0): [0.428136, -0.915827, 0.040011, -0.505379, 0.953933, 2.033633],
    (11, 7): [-1.084268, -0.666343, -0.173472, 1.868524, -0.681265, 2.232151],
    (2**31 - 1, 4095): [0.510867, 0.053115, 0.38673, -1.215182, 0.117103, -0.730701],
    (-5, 123): [0.553672, -0.546151, 0.595051, -0.270671, -0.271455, -1.387142],
}


@pytest.mark.parametrize("seed, position", list(PINNED))
def test_the_noise_at_a_seed_and_position_is_pinned(seed, position):
    got = PositionNoise(seed, vocab=6).at(position).tolist()
    assert got == pytest.approx(PINNED[seed, position], abs=1e-6), (
        "the noise stream changed: answers kept with their seed would replay differently"
    )


def test_the_noise_is_the_same_whoever_asks_and_in_whatever_order():
    one, other = PositionNoise(7, vocab=50), PositionNoise(7, vocab=50)
    forwards = [one.at(p) for p in range(100)]
    backwards = [other.at(p) for p in reversed(range(100))][::-1]
    assert all(np.array_equal(a, b) for a, b in zip(forwards, backwards))
    assert not np.array_equal(forwards[3], forwards[4]), "each position has noise of its own"
    assert not np.array_equal(PositionNoise(8, vocab=50).at(3), forwards[3]), "and each seed"


def test_a_seeded_choice_follows_the_pinned_noise():
    """choose() is argmax(log p + G): with p uniform over six tokens it is G's argmax."""
    noise = PositionNoise(11, vocab=6)
    uniform = torch.full((1, 6), 1 / 6)
    pinned = PINNED[11, 7]
    assert choose(uniform, [7], noise) == [max(range(6), key=pinned.__getitem__)]


def test_rows_that_share_a_position_share_its_noise_and_each_row_gets_its_own_positions():
    """A tree's rows at the same depth share their position's noise (sent once); rows in any order
    each take the noise of their own position."""
    noise = PositionNoise(5, vocab=50)
    uniform = torch.full((5, 50), 1 / 50)
    positions = [9, 7, 9, 8, 7]
    expected = [int(noise.at(p).argmax()) for p in positions]
    assert choose(uniform, positions, noise) == expected
    assert len(set(expected)) > 1  # the positions' noises differ: a row given another's would show


def test_fit_vocab_pads_with_zeros_and_cuts_the_ids_the_other_model_lacks():
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.125, 0.375, 0.5]])  # exact in binary
    padded = fit_vocab(probs, 5)
    assert padded.tolist() == [[0.5, 0.25, 0.25, 0.0, 0.0], [0.125, 0.375, 0.5, 0.0, 0.0]]
    assert fit_vocab(probs, 2).tolist() == [[0.5, 0.25], [0.125, 0.375]]
    assert fit_vocab(probs, 3) is probs
    # a padded id can never be chosen, whatever its noise
    noise = PositionNoise(3, vocab=5)
    for position in range(200):
        assert choose(torch.tensor([[0.5, 0.25, 0.25]]), [position], noise)[0] < 3


def test_probabilities_follow_temperature_top_k_and_top_p():
    """Worked by hand on logits log(4), log(2), log(1), log(1): softmax 0.5, 0.25, 0.125, 0.125."""
    logits = torch.tensor([[math.log(4), math.log(2), 0.0, 0.0]])
    assert probabilities(logits, SamplingParams(temperature=1.0)).tolist()[0] == pytest.approx(
        [0.5, 0.25, 0.125, 0.125]
    )
    # T = 0.5 squares the odds: 16 : 4 : 1 : 1
    assert probabilities(logits, SamplingParams(temperature=0.5)).tolist()[0] == pytest.approx(
        [16 / 22, 4 / 22, 1 / 22, 1 / 22]
    )
    # top-k 2 keeps 4 : 2
    assert probabilities(logits, SamplingParams(temperature=1.0, top_k=2)).tolist()[0] == pytest.approx(
        [2 / 3, 1 / 3, 0, 0]
    )
    # top-p 0.7: the tail whose mass is <= 0.3 goes (0.125 + 0.125 = 0.25), 0.25 would make it 0.5
    assert probabilities(logits, SamplingParams(temperature=1.0, top_p=0.7)).tolist()[0] == pytest.approx(
        [2 / 3, 1 / 3, 0, 0]
    )
    assert probabilities(logits, SamplingParams()).tolist()[0] == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_the_greedy_shortcut_picks_what_the_distribution_picks(penalty):
    """Greedy steps take the argmax of the logits without building the one-hot distribution: the same
    tokens, repetition penalty included (a penalty turns the winner here); sampling is unchanged."""
    torch.manual_seed(0)
    logits = torch.randn(5, 1000)
    logits[:, 7] = 8.0  # every row's winner, a token already seen
    logits[:, 8] = 7.0  # the winner once 7 is penalised (8 / 1.3 < 7)
    seen = torch.zeros(5, 1000, dtype=torch.bool)
    seen[:, 7] = True
    greedy = SamplingParams(temperature=0, repetition_penalty=penalty)
    rows = seen if penalty != 1.0 else None
    expected = choose(probabilities(logits, greedy, rows), range(5), None)
    assert next_tokens(logits, greedy, range(5), None, rows) == expected
    assert expected == ([8] * 5 if penalty != 1.0 else [7] * 5)
    sampled = SamplingParams(temperature=0.8, seed=3)
    noise = PositionNoise(3, 1000)
    assert next_tokens(logits, sampled, range(5), noise) == choose(probabilities(logits, sampled), range(5), noise)
