"""`draftscope bench lossless`'s reference (transformers' own logits processors) is the engine's
sampling rule: with a repetition penalty over the last ``repetition_window`` tokens and min-p, the
reference's distributions pick every token the engine wrote, greedy and seeded (fp32 tiny model).
A reference penalising the whole prefix (Hugging Face's own rule) picks others: the check rejects it."""

from dataclasses import replace

import pytest
import torch
from engine_fixtures import tiny_llama

from draftscope.bench.lossless_stats import logit_rows, reference_rows
from draftscope.cli import main
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import PositionNoise, SamplingParams, probabilities, recent_tokens

PENALISED = SamplingParams(temperature=1.0, min_p=0.05, repetition_penalty=3.0, repetition_window=4)
SEEDS = range(4)


@pytest.fixture(scope="module")
def engine(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=2, layers=1, hidden=32, sharpen=3.0), tokenizer, name="tiny")
    engine.eos_ids = set()  # every answer runs to its limit
    return engine


@pytest.fixture(scope="module")
def prompt(tokenizer):
    return tokenizer.encode(
        "The quick brown fox jumps over the lazy dog. The quick brown fox", add_special_tokens=False
    )


def answer(engine, prompt, params) -> list[int]:
    request = GenerationRequest(keep_cache=False, prompt_ids=prompt, max_new_tokens=16, sampling=params)
    return list(engine.generate(request))[-1].token_ids


def reference_picks(engine, prompt, tokens, params) -> list[int]:
    """The token the reference's distribution gives at each position, by the seeded rule (the
    position's Gumbel noise on log p; greedy: the argmax)."""
    rows = reference_rows(engine, prompt, tokens, params)
    if params.greedy:
        return rows.argmax(-1).tolist()
    noise = PositionNoise(params.seed, engine.vocab)
    return [int((rows[i].log() + torch.from_numpy(noise.at(len(prompt) + i))).argmax()) for i in range(len(tokens))]


def test_the_reference_is_the_engines_rule_with_the_penalty_window(engine, prompt):
    assert len(prompt) > 3 * PENALISED.repetition_window, "tokens outside the window: the window matters"
    whole_prefix = 0
    for params in [replace(PENALISED, temperature=0.0)] + [replace(PENALISED, seed=s) for s in SEEDS]:
        with torch.inference_mode():
            tokens = answer(engine, prompt, params)
            assert reference_picks(engine, prompt, tokens, params) == tokens, params
            unwindowed = replace(params, repetition_window=len(prompt) + len(tokens))
            whole_prefix += reference_picks(engine, prompt, tokens, unwindowed) != tokens
    assert whole_prefix, "a reference penalising the whole prefix disagrees: the check can fail"


def test_the_reference_distributions_are_the_engines(engine, prompt):
    """Row by row, the reference's distributions are those the engine samples from (min-p included,
    which seeded picks rarely test: a token it removes seldom wins)."""
    params = replace(PENALISED, seed=0, min_p=0.2)
    with torch.inference_mode():
        tokens = answer(engine, prompt, params)
        contexts = [prompt + tokens[:i] for i in range(len(tokens))]
        seen = recent_tokens(contexts, params.repetition_window, engine.vocab)
        engines = probabilities(logit_rows(engine, prompt, tokens[:-1]), params, seen)
        assert torch.allclose(reference_rows(engine, prompt, tokens, params), engines, atol=1e-6)


def test_min_p_and_the_penalty_window_are_the_audits_own_options(tmp_path, capsys):
    import argparse

    from draftscope.bench import lossless

    parser = argparse.ArgumentParser()
    lossless.add_arguments(parser)
    given = parser.parse_args(["--min-p", "0.1", "--repetition-penalty", "1.2", "--repetition-window", "16"])
    assert lossless._sampling(given) == SamplingParams(min_p=0.1, repetition_penalty=1.2, repetition_window=16)
    with pytest.raises(SystemExit):
        main(["bench", "lossless", "--model", str(tmp_path), "--repetition-window", "0"])
    assert "--repetition-window" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # checked against min-p's range as every face checks it
        main(["bench", "lossless", "--model", str(tmp_path), "--min-p", "2"])
    assert refused.value.code == 2 and "--min-p: must be between 0 and 1" in capsys.readouterr().err
